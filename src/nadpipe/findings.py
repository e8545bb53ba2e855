"""What a study found, computed from its summary rows: the sentences the report's first page
and the end of a run state (each study's `Study.findings` picks its own). Torch-free."""

from __future__ import annotations

import math

import pandas as pd


def cell_verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """Per architecture and cell (i, j) of a D(v1) ⊕ D(v2) study, over its seeds: how many
    seeds ran and learned, the channel each learned seed relied on (reliance angle below 45°:
    channel 1, above: channel 2), and the cell's verdict: "lower" / "higher" (every seed
    learned and relied on the channel of the lower / higher NAD index; i = j: "same"), "edge"
    (the seeds disagree: some did not learn, or they relied on different channels: a cell at
    the edge of learning, whose one-seed result is a coin), "not learned" (no seed learned)."""
    test = df[(df["split"] == "test") & (df["condition"] == "both")]
    rows = []
    for (arch, i, j), part in test.groupby(["arch", "nad_i", "nad_j"], sort=False):
        learned = part["outcome"] == "learned" if "outcome" in part else part["accuracy"].notna()
        learned &= part["reliance_deg"].notna()
        sides = set((part.loc[learned, "reliance_deg"] < 45).map({True: 1, False: 2}))
        if not learned.any():
            verdict = "not learned"
        elif not learned.all() or (len(sides) > 1 and i != j):
            verdict = "edge"
        elif i == j:  # both channels carry the same NAD: either side is the same choice
            verdict = "same"
        else:
            verdict = "lower" if (sides == {1}) == (i < j) else "higher"
        rows.append({"arch": arch, "nad_i": i, "nad_j": j, "seeds": len(part),
                     "learned": int(learned.sum()), "verdict": verdict})  # fmt: skip
    return pd.DataFrame(rows)


def pair_findings(df: pd.DataFrame) -> list[str]:
    """What a D(v1) ⊕ D(v2) study found, per architecture, from its cells over their seeds
    (`cell_verdicts`): in how many cells i ≠ j every seed relied on the channel of the lower
    NAD index, which cells are at the edge of learning (seeds disagree) or not learned; and the
    mean reliance angle of its learned models against atan(ε2/ε1), the angle of a predictor
    that weighs each channel by its margin (as a learner without directional bias would)."""
    cells = cell_verdicts(df)
    test = df[(df["split"] == "test") & (df["condition"] == "both")]
    if "outcome" in test:
        test = test[test["outcome"] == "learned"]
    test = test[test["reliance_deg"].notna()]
    out = []
    for arch, part in cells.groupby("arch", sort=False):
        off = part[part["nad_i"] != part["nad_j"]]
        seeds = int(part["seeds"].min())
        counts = off["verdict"].value_counts()
        k, n = int(counts.get("lower", 0)), len(off)
        line = f"{arch} ({seeds} seed{'s' if seeds > 1 else ''} per cell): "
        if n:
            line += f"relied on the channel of the lower NAD index in {k} of {n} cells with i ≠ j"
            line += " (every seed)" if seeds > 1 else ""
        else:  # both channels carry the same NAD in every cell: no choice between NADs to see
            line += "no cell with i ≠ j, so no choice between NAD indices to report"
        higher = int(counts.get("higher", 0))
        if higher:
            line += f", on the higher in {higher}"
        edge = off[off["verdict"] == "edge"]
        if len(edge):
            where = ", ".join(f"({a}, {b})" for a, b in edge[["nad_i", "nad_j"]].values)
            line += f"; at the edge of learning (its seeds disagree) in {len(edge)}: {where}"
        dead = int(counts.get("not learned", 0))
        if dead:
            line += f"; not learned by any seed in {dead}"
        if seeds == 1:
            line += "; with one seed per cell no cell can be told to be at the edge of learning"
        mine = test[test["arch"] == arch]
        if len(mine):
            margin = math.degrees(math.atan2(mine["eps2"].iloc[0], mine["eps1"].iloc[0]))
            mean = mine["reliance_deg"].mean()
            line += (
                f"; mean reliance angle {mean:.1f}° (atan(ε2/ε1) = {margin:.1f}°: the angle of "
                "a predictor that weighs each channel by its margin)"
            )
        out.append(line)
    return out


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
