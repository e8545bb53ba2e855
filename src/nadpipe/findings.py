"""What a study found, computed from its summary rows: the sentences the report's first page
and the end of a run state (each study's `Study.findings` picks its own). Torch-free."""

from __future__ import annotations

import math

import pandas as pd

# A model's `outcome` in the summary says how its training went (nadpipe.jobs.model_outcome):
# FIT (its training accuracy above guessing), NOT_FIT, DIVERGED. Whether it *learned*, as the
# findings say it, is another question: its test accuracy clearly above chance (`at_chance`).
FIT, NOT_FIT, DIVERGED = "fit", "did not fit", "diverged"
FORMER = {"learned": FIT, "did not learn": NOT_FIT}  # the words of summaries before 0.12.0


def outcome(word: str) -> str:
    """An outcome in this version's words (an earlier version's word read too)."""
    return FORMER.get(word, word)


def outcomes(values: pd.Series) -> pd.Series:
    """The `outcome` column in this version's words (a summary of an earlier one read too)."""
    return values.replace(FORMER)


def at_chance(accuracy: float, n: int, classes: int) -> bool:
    """Whether an accuracy on n samples is indistinguishable from guessing among `classes`:
    not above 1/classes by three binomial standard errors (a coin's accuracy on n points
    strays that far in 1 of about 700 draws)."""
    p = 1 / classes
    return accuracy <= p + 3 * math.sqrt(p * (1 - p) / max(n, 1))


def margin_angle(eps1: float, eps2: float) -> float:
    """atan(ε2/ε1) in degrees: the reliance angle of a predictor that weighs each channel by
    its margin (as a learner without directional bias would)."""
    return math.degrees(math.atan2(eps2, eps1))


def margin_band(angle: float) -> float:
    """How far from the margin angle a reliance angle still reads as weighing by margins: half
    the way to the nearer channel alone (0° or 90°)."""
    return min(angle, 90 - angle) / 2


# a cell's verdict (cell_verdicts) in words: the findings and the report's summary page
VERDICTS = {
    "lower": "the lower NAD index",
    "higher": "the higher NAD index",
    "margin": "by margin",
    "same": "i = j",
    "edge": "at the edge of learning",
    "tied": "tied",
    "not learned": "not learned",
}

# how many standard errors make an interval (mean ± TIE_SE·se): two, about 95 % for a normal
TIE_SE = 2


def accuracy_error(accuracy: float, n: int) -> float:
    """The binomial standard error of an accuracy measured on n test samples, with one sample
    right and one wrong added (Laplace's rule), so that 100 % on n samples is not ± 0."""
    n = max(n, 1)
    p = (min(max(accuracy, 0.0), 1.0) * n + 1) / (n + 2)
    return math.sqrt(p * (1 - p) / n)


def _learned(part: pd.DataFrame) -> pd.Series:
    """Per row: the model learned (its training did, and its test accuracy with both channels
    is clearly above chance: at_chance on the test set's size, 2 classes) and has an angle."""
    ok = outcomes(part["outcome"]) == FIT if "outcome" in part else part["accuracy"].notna()
    if "n_test" in part:
        above = [
            not at_chance(a, int(n), 2)
            for a, n in zip(part["accuracy"], part["n_test"], strict=True)
        ]
        ok = ok & pd.Series(above, index=part.index)
    return ok & part["reliance_deg"].notna()


def cell_verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """Per architecture and cell (i, j) of a D(v1) ⊕ D(v2) study, over its seeds: how many
    seeds ran and learned (clearly above chance on the test set, `_learned`), their reliance
    angles, and the cell's verdict: "margin" (every seed weighed the channels by their margins:
    its angle within `margin_band` of atan(ε2/ε1)), "lower" / "higher" (every seed relied on
    the channel of the lower / higher NAD index: angle below 45°, channel 1; above, channel 2),
    "same" (i = j), "edge" (the seeds disagree: some did not learn, or they relied on
    different channels: a cell at the edge of learning, whose one-seed result is a coin),
    "tied" (every seed on one side, but 45° lies within TIE_SE standard errors of their mean
    angle: the seeds cannot tell the channels apart), "not learned" (no seed learned).
    Each cell carries its intervals: the test accuracy over its seeds with its standard error
    (`accuracy`, `accuracy_se`: the seeds' spread, or where that is smaller the binomial error
    of all their test samples together), the learned seeds' mean reliance angle with the
    standard error of that mean (`reliance_mean`, `reliance_se`; NaN with fewer than two
    learned seeds)."""
    test = df[(df["split"] == "test") & (df["condition"] == "both")]
    rows = []
    for (arch, i, j), part in test.groupby(["arch", "nad_i", "nad_j"], sort=False):
        learned = _learned(part)
        angles = part.loc[learned, "reliance_deg"]
        sides = set((angles < 45).map({True: 1, False: 2}))
        m = margin_angle(part["eps1"].iloc[0], part["eps2"].iloc[0])
        mean = float(angles.mean()) if len(angles) else math.nan
        se = float(angles.std(ddof=1) / math.sqrt(len(angles))) if len(angles) > 1 else math.nan
        if not learned.any():
            verdict = "not learned"
        elif not learned.all():
            verdict = "edge"
        elif ((angles - m).abs() <= margin_band(m)).all():
            verdict = "margin"
        elif i == j:  # both channels carry the same NAD: either side is the same choice
            verdict = "same"
        elif len(sides) > 1:
            verdict = "edge"
        elif abs(mean - 45) <= TIE_SE * se:
            verdict = "tied"
        else:
            verdict = "lower" if (sides == {1}) == (i < j) else "higher"
        accuracy = float(part["accuracy"].mean())
        samples = int(part["n_test"].sum()) if "n_test" in part else 0
        # the seeds' own spread, or the test samples' where the seeds agree more closely
        spread = float(part["accuracy"].std(ddof=1) / math.sqrt(len(part))) if len(part) > 1 else 0
        error = max(spread, accuracy_error(accuracy, samples)) if samples else math.nan
        # how far each learned seed is from the channel it relied on alone (0° or 90°)
        alone = float(angles.map(lambda a: a if a < 45 else 90 - a).max()) if len(angles) else 0
        rows.append(
            {
                "arch": arch,
                "nad_i": i,
                "nad_j": j,
                "seeds": len(part),
                "learned": int(learned.sum()),
                "verdict": verdict,
                "reliance_min": angles.min(),
                "reliance_max": angles.max(),
                "reliance_mean": mean,
                "reliance_se": se,
                "accuracy": accuracy,
                "accuracy_se": error,
                "from_channel": alone,
                "margin_deg": m,
            }
        )
    return pd.DataFrame(rows)


def pair_findings(df: pd.DataFrame) -> list[str]:
    """What a D(v1) ⊕ D(v2) study found, per architecture, from its cells over their seeds
    (`cell_verdicts`), behaviour by behaviour, each with the numbers that show it: the cells
    i ≠ j where every seed relied on the channel of the lower (or higher) NAD index and how
    close to that channel alone; those where it weighed the channels by their margins, against
    atan(ε2/ε1); those at the edge of learning (seeds disagree) and those not learned. No
    statistic is averaged over cells that behave differently."""
    cells = cell_verdicts(df)
    out = []
    for arch, part in cells.groupby("arch", sort=False):
        off = part[part["nad_i"] != part["nad_j"]]
        seeds = int(part["seeds"].min())
        n = len(off)
        head = f"{arch} ({seeds} seed{'s' if seeds > 1 else ''} per cell): "
        if not n:  # both channels carry the same NAD in every cell: no choice between NADs
            out.append(
                head
                + "no cell with i ≠ j, so no choice between NAD indices to report"
                + _margin_part(part, len(part), "cells")
            )
            continue
        counts = off["verdict"].value_counts()
        parts = []
        for side in ("lower", "higher"):
            cells_of = off[off["verdict"] == side]
            if len(cells_of):
                every = "every seed, " if seeds > 1 else ""
                parts.append(
                    f"relied on the channel of the {side} NAD index in {len(cells_of)} "
                    f"of {n} cells with i ≠ j ({every}each within "
                    f"{cells_of['from_channel'].max():.1f}° of that channel "
                    "alone)"
                )
        margin = _margin_part(off, n, "cells with i ≠ j")
        if margin:
            parts.append(margin.removeprefix("; "))
        edge = off[off["verdict"] == "edge"]
        if len(edge):
            where = ", ".join(f"({a}, {b})" for a, b in edge[["nad_i", "nad_j"]].values)
            parts.append(f"at the edge of learning (its seeds disagree) in {len(edge)}: {where}")
        tied = off[off["verdict"] == "tied"]
        if len(tied):
            where = ", ".join(
                f"({r.nad_i}, {r.nad_j}): {r.reliance_mean:.1f} ± {TIE_SE * r.reliance_se:.1f}°"
                for r in tied.itertuples()
            )
            parts.append(
                f"tied in {len(tied)} (45° within {TIE_SE} standard errors of the seeds' mean "
                f"angle: they cannot tell the channels apart): {where}"
            )
        dead = int(counts.get("not learned", 0))
        if dead:
            parts.append(
                f"not learned by any seed in {dead} (test accuracy not clearly above chance)"
            )
        if seeds == 1:
            parts.append("with one seed per cell no cell can be told to be at the edge of learning")
        behaviour = _behaviour(counts, n)
        out.append(head + behaviour + "; ".join(parts))
    return out


def _behaviour(counts: pd.Series, n: int) -> str:
    """What an architecture does, when every cell i ≠ j does the same: "the lower NAD index: "
    and the like; "" when its cells differ (the parts say each)."""
    top = counts.index[0] if len(counts) else None
    return f"{VERDICTS[top]}: " if top in VERDICTS and counts.iloc[0] == n else ""


def _margin_part(cells: pd.DataFrame, n: int, what: str) -> str:
    """The cells whose every seed weighed the channels by their margins, with their angles."""
    by = cells[cells["verdict"] == "margin"]
    if not len(by):
        return ""
    m = float(by["margin_deg"].iloc[0])
    lo, hi = f"{by['reliance_min'].min():.1f}", f"{by['reliance_max'].max():.1f}"
    return (
        f"; weighed the channels by their margins in {len(by)} of {n} {what}, whatever "
        f"their NAD indices: reliance angle {lo if lo == hi else f'{lo}–{hi}'}° against "
        f"atan(ε2/ε1) = {m:.1f}° (the angle of a "
        f"predictor that weighs each channel by its margin; within ±{margin_band(m):.1f}°, "
        "half the way to either channel alone)"
    )


def rank_findings(df: pd.DataFrame, key: str) -> list[str]:
    """Per architecture, Spearman's rank correlation between the index column `key` (e.g. the
    NAD index) and the test accuracy of its first evaluation condition."""
    test = df[df["split"] == "test"]
    test = test[test["condition"] == test["condition"].iloc[0]]
    out = []
    for arch, part in test.groupby("arch", sort=False):
        rho = part[key].rank().corr(part["accuracy"].rank())
        out.append(f"{arch}: Spearman rank correlation of NAD index and accuracy {rho:.2f}")
    return out
