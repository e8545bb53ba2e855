"""Figures a reader understands without the code: every colour bar says its quantity and unit,
panels that are compared share one scale, and cells that hold no ordinary value (a diverged
training, a boundary not found within reach, a count that does not apply) are marked, not
drawn as numbers."""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from .findings import DIVERGED, FIT, NOT_FIT, cell_verdicts, outcome, outcomes  # noqa: E402
from .io import atomic_write, load_parquet, read_artifact  # noqa: E402
from .settings import DEFAULT_SHAPE
from .studies import REGISTRY

AXIS_I = "NAD index i of v1 (channel 1)"
AXIS_J = "NAD index j of v2 (channel 2)"
PANELS = {
    "both": "both channels (in distribution)",
    "ch1_only": "channel 1 only (channel 2 zeroed)",
    "ch2_only": "channel 2 only (channel 1 zeroed)",
}


def save_figure(fig, output: str):
    """Write the figure and return it (closed: its artists stay readable, e.g. by tests)."""
    atomic_write(output, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return fig


def no_axes(ax) -> None:
    """An image panel without axes. Its ticks are removed first: matplotlib still places the
    ticks of an axis turned off when it lays the figure out (a third of the NAD figure's time,
    the same pixels)."""
    ax.set(xticks=[], yticks=[])
    ax.axis("off")


def _rows_of(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    df = df[df["arch"] == arch]
    if df.empty:
        raise ValueError(f"no rows for architecture {arch!r}")
    return df


def _value(df: pd.DataFrame, column: str) -> str:
    vals = df[column].dropna().unique() if column in df else []
    return ", ".join(f"{v:g}" for v in sorted(vals)) if len(vals) else "?"


# -- heatmaps over NAD-index pairs ------------------------------------------------------------


def pair_grid(df: pd.DataFrame, condition: str, split: str = "test", value: str = "accuracy"):
    """Mean of `value` over seeds, rows = NAD index i of v1, columns = NAD index j of v2."""
    sel = df[(df["split"] == split) & (df["condition"] == condition)]
    # dropna=False keeps cells whose every seed is NaN (diverged), so they are drawn and marked
    return sel.pivot_table(
        index="nad_i", columns="nad_j", values=value, aggfunc="mean", dropna=False
    )


NOT_FOUND = ("tab:blue", "...")  # a margin search that found no boundary: (colour, hatch)


@dataclass(frozen=True)
class Mark:
    """Cells of a heatmap that hold no ordinary value, hatched and named in the legend."""

    cells: pd.DataFrame  # bool, rows nad_i, columns nad_j
    colour: str
    label: str  # the legend's words
    text: str = ""  # written in a marked cell whose value is not a number
    hatch: str = "xx"  # each kind of mark its own pattern (and colour), told apart at a glance


def _cells(df: pd.DataFrame, flags: pd.Series) -> pd.DataFrame:
    return (
        df.assign(_flag=flags.astype(float))
        .pivot_table(index="nad_i", columns="nad_j", values="_flag", aggfunc="max")
        .fillna(0)
        .astype(bool)
    )


def outcome_marks(df: pd.DataFrame) -> list[Mark]:
    """The marks every figure of trained models shows: cells where some seed's training
    diverged, and cells where some seed did not fit its training set (training accuracy at
    guessing)."""
    marks = []
    models = df.drop_duplicates([c for c in ("arch", "nad_i", "nad_j", "seed") if c in df])
    if "diverged" in df and df["diverged"].any():
        n = int(models["diverged"].sum())
        marks.append(Mark(_cells(df, df["diverged"]), "red", f"training diverged ({n} models)"))
    if "outcome" in df and (df["outcome"] == NOT_FIT).any():
        dead = df["outcome"] == NOT_FIT
        n = int((models["outcome"] == NOT_FIT).sum())
        label = f"{NOT_FIT}: training accuracy at guessing ({n} models)"
        marks.append(Mark(_cells(df, dead), "dimgrey", label, "did not\nfit"))
    guessed = _not_learned(df)
    if guessed is not None and guessed.any():
        n = len(df[guessed].drop_duplicates(["nad_i", "nad_j"]))
        label = f"not learned: every seed fit, none above chance on the test set ({n} cells)"
        marks.append(Mark(_cells(df, guessed), "darkorange", label, hatch="//"))
    return marks


def _not_learned(df: pd.DataFrame) -> pd.Series | None:
    """Rows of the cells the findings call not learned (nadpipe.findings.cell_verdicts: no
    seed's test accuracy clearly above chance) though every seed fit its training set: their
    values are drawn, and read as no finding. None where the rows cannot say."""
    need = {"nad_i", "nad_j", "split", "condition", "outcome", "reliance_deg", "eps1", "eps2"}
    if not need <= set(df):
        return None
    verdicts = cell_verdicts(df.assign(arch=df.get("arch", "")))
    cells = verdicts.loc[verdicts["verdict"] == "not learned", ["nad_i", "nad_j"]]
    fit = df.groupby(["nad_i", "nad_j"])["outcome"].transform(lambda o: (outcomes(o) == FIT).all())
    keys = pd.MultiIndex.from_frame(df[["nad_i", "nad_j"]])
    return pd.Series(keys.isin(pd.MultiIndex.from_frame(cells)), index=df.index) & fit


def _number(val: float, fmt: str) -> str:
    if fmt == "auto":
        return f"{val:.0f}" if abs(val) >= 100 else f"{val:.3g}"
    return format(val, fmt)


def _hatch(ax, r: int, c: int, colour: str, hatch: str = "xx") -> None:
    ax.add_patch(
        Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch=hatch, edgecolor=colour, linewidth=0)
    )


def _panel(ax, grid: pd.DataFrame, title: str, fmt: str, marks: Sequence[Mark] = (), **imshow):
    """One heatmap panel: values written in the cells; each mark's cells hatched in its colour,
    its text written where the cell holds no number. On a log scale an exact zero, which the
    scale cannot show, is written "0" and counted by `zeros_on_log_scale`."""
    vals = grid.to_numpy(dtype=float)
    shown = np.where(np.isfinite(vals), vals, np.nan)
    log = isinstance(imshow.get("norm"), LogNorm)
    im = ax.imshow(np.where(log & (shown == 0), np.nan, shown), origin="lower", **imshow)
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
    ax.set_xlabel(AXIS_J)
    ax.set_ylabel(AXIS_I)
    ax.set_title(title, fontsize=10)
    norm = im.norm
    for (r, c), val in np.ndenumerate(vals):
        if np.isfinite(val):
            level = norm(val) if not (log and val <= 0) else 0.0
            light = np.isfinite(level) and level < 0.6
            ax.text(
                c,
                r,
                _number(val, fmt),
                ha="center",
                va="center",
                fontsize=8,
                color="white" if light else "black",
            )
    for mark in marks:
        bad = mark.cells.reindex_like(grid).fillna(False).to_numpy(bool)
        for (r, c), b in np.ndenumerate(bad):
            if b:
                _hatch(ax, r, c, mark.colour, mark.hatch)
                if mark.text and not np.isfinite(vals[r, c]):
                    ax.text(
                        c, r, mark.text, ha="center", va="center", fontsize=7, color=mark.colour
                    )
    return im


def _legend_note(fig, marks: Sequence[Mark]) -> None:
    handles = [
        Patch(facecolor="none", edgecolor=m.colour, hatch=m.hatch, label=m.label)
        for m in marks
        if m.cells.to_numpy().any()
    ]
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=len(handles),
            fontsize=8,
            frameon=False,
        )


def _pair_title(df: pd.DataFrame, arch: str, what: str) -> str:
    return (
        f"{arch}: {what}, D(v1) ⊕ D(v2) with ε1 = {_value(df, 'eps1')}, ε2 = "
        f"{_value(df, 'eps2')}, σ = {_value(df, 'sigma')}; mean over {df['seed'].nunique()} seed(s)"
    )


def pair_heatmaps(df: pd.DataFrame, arch: str, output: str) -> None:
    """Three panels (both / ch1 only / ch2 only) of mean test accuracy, one colour scale."""
    df = _rows_of(df, arch)
    marks = outcome_marks(df)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2), constrained_layout=True)
    for ax, (cond, title) in zip(axes, PANELS.items(), strict=True):
        grid = pair_grid(df, cond) * 100
        im = _panel(ax, grid, title, ".0f", marks, vmin=50, vmax=100, cmap="viridis")
    fig.colorbar(im, ax=axes, label="test accuracy (%)", shrink=0.9)
    fig.suptitle(_pair_title(df, arch, "test accuracy"))
    _legend_note(fig, marks)
    return save_figure(fig, output)


def reliance_heatmaps(df: pd.DataFrame, arch: str, output: str) -> None:
    """The channel reliance angle, and the median margins along v1 and v2 on one scale from 0
    to analysis.margin_max for every architecture, cells where the boundary was not found
    within it marked."""
    df = _rows_of(df, arch)
    marks = outcome_marks(df)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2), constrained_layout=True)
    grid = pair_grid(df, "both", value="reliance_deg")
    im = _panel(
        axes[0],
        grid,
        "reliance: 0° = v1 only, 90° = v2 only",
        ".0f",
        marks,
        vmin=0,
        vmax=90,
        cmap="magma",
    )
    fig.colorbar(im, ax=axes[0], label="reliance angle (degrees)", shrink=0.8)
    margins = {m: pair_grid(df, "both", value=f"margin_{m}") for m in ("v1", "v2")}
    top = float(df["margin_max"].max()) if "margin_max" in df else 10.0
    not_found = {m: g.apply(lambda col: col == np.inf) for m, g in margins.items()}
    label = f"boundary not found within analysis.margin_max = {top:g} for most points"
    for ax, (m, g) in zip(axes[1:], margins.items(), strict=True):
        title = f"median distance to the boundary along {'v1 ⊕ 0' if m == 'v1' else '0 ⊕ v2'}"
        found = [*marks, Mark(not_found[m], NOT_FOUND[0], label, "not\nfound", NOT_FOUND[1])]
        im = _panel(ax, g, title, ".2g", found, vmin=0, vmax=top, cmap="cividis")
    fig.colorbar(
        im, ax=list(axes[1:]), label=f"median margin (input units, 0 to {top:g})", shrink=0.8
    )
    fig.suptitle(_pair_title(df, arch, "channel reliance and margins"))
    either = (not_found["v1"] | not_found["v2"].reindex_like(not_found["v1"])).fillna(False)
    _legend_note(fig, [*marks, Mark(either.astype(bool), NOT_FOUND[0], label, hatch=NOT_FOUND[1])])
    return save_figure(fig, output)


def complexity_heatmaps(df: pd.DataFrame, arch: str, output: str) -> None:
    """The softmax Jacobian norm (log scale) and the transition counts per ReLU unit on one
    shared scale; a model without ReLU modules has no transition count ("n/a")."""
    df = _rows_of(df, arch).copy()
    marks = outcome_marks(df)
    kinds = {
        "same_class": "same-class ellipses",
        "diff_class": "different-class ellipses",
        "random": "random ellipses",
    }
    units = df["relu_units"].replace(0, np.nan) if "relu_units" in df else np.nan
    for k in kinds:
        df[f"per_unit_{k}"] = df[f"transitions_{k}"] / units
    fig, axes = plt.subplots(1, 4, figsize=(20, 5.2), constrained_layout=True)
    jac = pair_grid(df, "both", value="jacobian_norm_test")
    positive = jac.to_numpy(float)
    positive = positive[np.isfinite(positive) & (positive > 0)]
    norm = LogNorm(positive.min(), positive.max()) if len(positive) else None
    zeros = Mark(jac == 0, "black", "exactly 0 (below any log scale)")
    im = _panel(
        axes[0],
        jac,
        "softmax input-Jacobian norm (test)",
        ".2g",
        [*marks, zeros],
        norm=norm,
        cmap="magma",
    )
    fig.colorbar(im, ax=axes[0], label="mean ‖∂softmax/∂x‖_F (log scale)", shrink=0.8)
    grids = {k: pair_grid(df, "both", value=f"per_unit_{k}") for k in kinds}
    vals = np.concatenate([g.to_numpy(float).ravel() for g in grids.values()])
    vals = vals[np.isfinite(vals)]
    lo, hi = (vals.min(), vals.max()) if len(vals) else (0.0, 1.0)
    no_relu = "relu_units" not in df or (df["relu_units"] == 0).all()
    na = "no ReLU modules: transition counts do not apply"
    for ax, (k, g) in zip(axes[1:], grids.items(), strict=True):
        found = [*marks, Mark(g.isna(), "dimgrey", na, "n/a")] if no_relu else marks
        im = _panel(
            ax,
            g,
            f"transitions per ReLU unit, {kinds[k]}",
            ".2g",
            found,
            vmin=lo,
            vmax=hi if hi > lo else lo + 1,
            cmap="viridis",
        )
    fig.colorbar(
        im,
        ax=list(axes[1:]),
        shrink=0.8,
        label="activation-pattern changes per ReLU unit per ellipse (shared scale)",
    )
    fig.suptitle(_pair_title(df, arch, "complexity of the learned predictor"))
    extra = [Mark(grids["random"].isna(), "dimgrey", na)] if no_relu else []
    _legend_note(fig, [*marks, zeros, *extra])
    return save_figure(fig, output)


def cross_section_grid(sections: Sequence[dict], arch: str, output: str) -> None:
    """The decision boundary (f = 0) in the plane of v1 (+) 0 and 0 (+) v2 at the first stored
    test point of each (i, j), one panel per pair (rows i, columns j), one colour scale."""
    by_pair = {(int(s["key_nad_i"]), int(s["key_nad_j"])): s for s in sections}
    rows = sorted({i for i, _ in by_pair}, reverse=True)  # v1's index grows upwards
    cols = sorted({j for _, j in by_pair})
    finite = [np.abs(s["values"][0]) for s in by_pair.values() if np.isfinite(s["values"][0]).all()]
    lim = max((float(f.max()) for f in finite), default=1.0) or 1.0
    fig, axes = plt.subplots(
        len(rows),
        len(cols),
        figsize=(2.5 * len(cols) + 1.6, 2.5 * len(rows) + 0.9),
        squeeze=False,
        constrained_layout=True,
    )
    mesh = None
    for r, i in enumerate(rows):
        for c, j in enumerate(cols):
            ax = axes[r][c]
            s = by_pair.get((i, j))
            if s is None:
                no_axes(ax)
                continue
            ax.set_title(f"i={i}, j={j}", fontsize=9)
            f = s["values"][0]  # (R, R): rows along v2 (b), columns along v1 (a)
            if not np.isfinite(f).all():
                ax.text(
                    0.5,
                    0.5,
                    "diverged",
                    ha="center",
                    va="center",
                    color="red",
                    transform=ax.transAxes,
                )
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            mesh = ax.pcolormesh(
                s["a"], s["b"], f, cmap="RdBu_r", vmin=-lim, vmax=lim, shading="auto"
            )
            if f.min() < 0 < f.max():
                ax.contour(s["a"], s["b"], f, levels=[0], colors="k", linewidths=1.2)
            ax.plot([1], [1], "^", ms=5, color="k", label="class +1 mean")
            ax.plot([-1], [-1], "v", ms=5, color="k", mfc="white", label="class −1 mean")
            ax.set_aspect("equal")
            if outcome(str(s.get("key_outcome", FIT))) == NOT_FIT:
                ax.text(
                    0.5,
                    0.5,
                    NOT_FIT,
                    ha="center",
                    va="center",
                    color="dimgrey",
                    weight="bold",
                    transform=ax.transAxes,
                )
                ax.set_title(f"i={i}, j={j} ({NOT_FIT})", fontsize=9, color="dimgrey")
            if r == len(rows) - 1:
                ax.set_xlabel("along v1 ⊕ 0 (units of ε1)", fontsize=8)
            if c == 0:
                ax.set_ylabel("along 0 ⊕ v2 (units of ε2)", fontsize=8)
            ax.tick_params(labelsize=7)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes, shrink=0.6, label="f = logit(+1) − logit(−1) (shared scale)")
        handles, labels = next(ax for ax in axes.ravel() if ax.lines).get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(
        f"{arch}: decision boundary f = 0 (black) through a test point; red f > 0 (class +1); "
        "a vertical boundary = uses channel 1, a horizontal one = channel 2",
        fontsize=9,
    )
    return save_figure(fig, output)


# -- the per-model studies --------------------------------------------------------------------


DID_NOT_FIT = f"{NOT_FIT} (training accuracy at guessing)"


def _line_over_seeds(ax, sel: pd.DataFrame, x: str, y: str, label: str, scale: float = 1) -> None:
    """Mean over seeds as a line with markers, min..max over seeds as a band; points where some
    seed did not fit its training set circled in grey (labelled once per axes)."""
    stats = sel.groupby(x)[y].agg(["mean", "min", "max"]).sort_index() * scale
    line = ax.plot(stats.index, stats["mean"], marker="o", label=label)[0]
    ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2, color=line.get_color())
    if "outcome" in sel:
        dead = sel.groupby(x)["outcome"].agg(lambda o: (o == NOT_FIT).any()).sort_index()
        at = stats.index[dead.reindex(stats.index).fillna(False).to_numpy(bool)]
        if len(at):
            first = DID_NOT_FIT not in [h.get_label() for h in ax.lines]
            ax.plot(
                at,
                stats.loc[at, "mean"],
                linestyle="none",
                marker="o",
                ms=11,
                mfc="none",
                mec="dimgrey",
                mew=1.5,
                label=DID_NOT_FIT if first else "_",
            )


def _nad_axis(ax, values: pd.Series) -> None:
    """A symlog NAD-index axis from 0 with round, non-overlapping tick labels."""
    top = float(values.max())
    ax.set_xscale("symlog", linthresh=10)
    ticks = [
        t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if t <= max(top, 1)
    ]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlim(-0.3, max(top, 1) * 1.15)


def rank_correlation(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rank correlation (Pearson's of the ranks, ties averaged)."""
    return float(x.rank().corr(y.rank()))


def _dv_title(df: pd.DataFrame) -> str:
    return f"x = ε·y·v + w, ε = {_value(df, 'eps')}, σ = {_value(df, 'sigma')}"


def _protocols(test: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) per protocol, in the summary's order ("" alone without named ones: the
    column is null)."""
    protocols = test["protocol"].fillna("")
    return [(p, test[protocols == p]) for p in dict.fromkeys(protocols)]


def _agreement(rows: pd.DataFrame) -> str:
    """A protocol's agreement with the reference, as the summary states it ("" without)."""
    if "reference_mean_abs_diff" not in rows or rows["reference_mean_abs_diff"].isna().all():
        return ""
    r = rows.iloc[0]
    pearson = (
        "n/a" if not math.isfinite(r["reference_pearson"]) else f"{r['reference_pearson']:.2f}"
    )
    return (
        f"|Δ| mean {r['reference_mean_abs_diff']:.1f}, max {r['reference_max_abs_diff']:.1f} "
        f"points, r = {pearson}"
    )


def single_direction_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    """Test accuracy against the NAD index, one curve per protocol, the published curve beside
    them when the study has a reference (each protocol's agreement in its legend)."""
    df = _rows_of(df, arch)
    test = df[df["split"] == "test"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), constrained_layout=True)
    for protocol, rows in _protocols(test):
        label = protocol or "test accuracy"
        said = _agreement(rows)
        _line_over_seeds(ax, rows, "nad_k", "accuracy", f"{label} ({said})" if said else label, 100)
    if "reference_accuracy" in test and test["reference_accuracy"].notna().any():
        ref = test.groupby("nad_k")["reference_accuracy"].first().dropna() * 100
        ax.plot(ref.index, ref.to_numpy(), "k--", marker="s", ms=4, label="published")
    ax.set_xlabel("NAD index k of v")
    ax.set_ylabel("test accuracy (%)")
    ax.axhline(50, color="grey", linewidth=0.8, linestyle=":", label="chance")
    ax.legend(fontsize=8)
    _nad_axis(ax, test["nad_k"])
    rho = rank_correlation(test["nad_k"], test["accuracy"])
    fig.suptitle(
        f"{arch}: trained on D(NAD k), {_dv_title(test)}, {test['seed'].nunique()} seed(s); "
        f"Spearman ρ(k, accuracy) = {rho:.2f}",
        fontsize=10,
    )
    return save_figure(fig, output)


def _cell(grid: pd.DataFrame) -> tuple[float, float]:
    """A map cell's height and width: the spacing of its frequencies a and b (fourier.step;
    1 along an axis with a single frequency)."""

    def spacing(values) -> float:
        gaps = np.diff(np.unique(values))
        return float(gaps.min()) if len(gaps) else 1.0

    return spacing(grid.index), spacing(grid.columns)


def _map(ax, grid: pd.DataFrame, title: str):
    a, b = grid.index.to_numpy(), grid.columns.to_numpy()
    ha, hb = (side / 2 for side in _cell(grid))  # a cell is one step wide
    extent = (b.min() - hb, b.max() + hb, a.max() + ha, a.min() - ha)
    im = ax.imshow(grid.to_numpy(float), vmin=50, vmax=100, cmap="viridis", extent=extent)
    ax.set_xlabel("frequency b (cycles per image, along columns)")
    ax.set_ylabel("frequency a (cycles per image, along rows)")
    ax.set_title(title, fontsize=8)
    return im


def fourier_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    """The test-accuracy map over Fourier frequencies, one panel per protocol, the published
    map beside them when the study has a reference; models that did not fit hatched."""
    df = _rows_of(df, arch)
    test = df[df["split"] == "test"]
    maps = [
        (
            p or "test accuracy",
            _agreement(rows),
            rows.pivot_table(index="freq_a", columns="freq_b", values="accuracy") * 100,
            rows,
        )
        for p, rows in _protocols(test)
    ]
    if "reference_accuracy" in test and test["reference_accuracy"].notna().any():
        ref = test.pivot_table(index="freq_a", columns="freq_b", values="reference_accuracy")
        ref = ref * 100  # percent, as the maps of the results
        maps.append(("published", "", ref, None))
    fig, axes = plt.subplots(
        1, len(maps), figsize=(6.2 * len(maps) + 0.8, 6), constrained_layout=True, squeeze=False
    )
    dead_any = False
    for ax, (name, said, grid, rows) in zip(axes[0], maps, strict=True):
        im = _map(ax, grid, f"{name}\n{said}" if said else name)
        if rows is not None and "outcome" in rows:
            dead = rows.assign(dead=rows["outcome"] == NOT_FIT).pivot_table(
                index="freq_a", columns="freq_b", values="dead", aggfunc="max"
            )
            sa, sb = _cell(grid)
            for (fa, fb), d in dead.stack().items():
                if d:  # lightly, so that the map stays readable
                    cell = Rectangle(
                        (fb - sb / 2, fa - sa / 2),
                        sb,
                        sa,
                        fill=False,
                        hatch="//",
                        edgecolor="lightgrey",
                        linewidth=0,
                    )
                    ax.add_patch(cell)
                    dead_any = True
    fig.colorbar(im, ax=list(axes[0]), label="test accuracy (%)")
    if dead_any:
        patch = Patch(facecolor="none", edgecolor="lightgrey", hatch="//", label=DID_NOT_FIT)
        fig.legend(handles=[patch], loc="outside lower center", fontsize=8, frameon=False)
    a = maps[0][2].index.to_numpy()
    layout = "zero frequency in the centre" if a.min() < 0 else "zero frequency at the top left"
    fig.suptitle(
        f"{arch}: trained on D(Fourier direction (a, b)), {_dv_title(test)}\n{layout}; "
        f"{test['seed'].nunique()} seed(s)",  # two lines: one is wider than the figure
        fontsize=9,
    )
    return save_figure(fig, output)


CIFAR_LINES = {
    "all": "all channels",
    "cifar_only": "CIFAR only (synthetic zeroed)",
    "synthetic_only": "synthetic only (CIFAR zeroed)",
}


def cifar_nad_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    df = _rows_of(df, arch)
    test = df[df["split"] == "test"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 4.8), constrained_layout=True)
    for cond, label in CIFAR_LINES.items():
        _line_over_seeds(ax, test[test["condition"] == cond], "nad_k", "accuracy", label, 100)
    ax.set_xlabel("NAD index k of v (synthetic channel)")
    ax.set_ylabel("test accuracy (%)")
    ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    ax.legend(fontsize=8)
    _nad_axis(ax, test["nad_k"])
    _line_over_seeds(
        ax2, test[test["condition"] == "all"], "nad_k", "v_vs_cifar_reliance_deg", "reliance"
    )
    ax2.set_ylim(0, 90)
    ax2.set_xlabel("NAD index k of v")
    ax2.set_ylabel("degrees (0 = only v, 90 = only the CIFAR channels)")
    ax2.set_title("input gradient: along v against the CIFAR channels", fontsize=10)
    _nad_axis(ax2, test["nad_k"])
    fig.suptitle(
        f"{arch}: binary CIFAR-10 ⊕ D(NAD k), ε = {_value(test, 'eps')}, "
        f"σ = {_value(test, 'sigma')}; {test['seed'].nunique()} seed(s)"
    )
    return save_figure(fig, output)


def poison_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    df = _rows_of(df, arch)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), constrained_layout=True)
    _line_over_seeds(ax, df[df["split"] == "test"], "nad_i", "accuracy", "clean test set", 100)
    _line_over_seeds(
        ax, df[df["split"] == "train"], "nad_i", "accuracy", "poisoned training set", 100
    )
    ax.set_xlabel("poisoned NAD index i (carriers along NADs i, i+1)")
    ax.set_ylabel("accuracy (%)")
    ax.axhline(10, color="grey", linewidth=0.8, linestyle=":", label="chance")
    ax.legend(fontsize=8)
    _nad_axis(ax, df["nad_i"])
    fig.suptitle(
        f"{arch}: CIFAR-10 poisoned along NADs (carrier ε = {_value(df, 'eps')}), "
        f"{df['seed'].nunique()} seed(s)"
    )
    return save_figure(fig, output)


def flip_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    df = _rows_of(df, arch)
    test = df[df["split"] == "test"]
    fig, ax = plt.subplots(figsize=(5.5, 4.8), constrained_layout=True)
    names = ["original", "flipped"]
    for pos, name in enumerate(names):
        acc = test[test["representation"] == name]["accuracy"].to_numpy() * 100
        ax.bar(pos, np.nanmean(acc) if len(acc) else np.nan, color=f"C{pos}", alpha=0.7)
        ax.scatter(np.full(len(acc), pos), acc, color="black", zorder=3, s=12)
    ax.set_xticks(range(len(names)), ["original", "flipped (NAD k ↔ d−1−k)"])
    ax.set_ylabel("test accuracy (%)")
    fig.suptitle(f"{arch}: CIFAR-10 in the NAD basis, reversed; {test['seed'].nunique()} seed(s)")
    return save_figure(fig, output)


def nad_bands_figure(df: pd.DataFrame, arch: str, output: str) -> None:
    """Rows: the models' variants; columns: the unchanged test inputs, then each band of
    NADs removed, then each band alone; cells: test accuracy (%), mean over seeds."""

    df = _rows_of(df, arch)
    study = df["study"].iloc[0]
    unmasked = next(iter(REGISTRY[study].conditions(DEFAULT_SHAPE)))  # every channel kept
    test = df[(df["split"] == "test") & (df["condition"] == unmasked)]
    bands = sorted(
        {tuple(int(x) for x in c.split("_")[-2:]) for c in test if c.startswith("band_only_")}
    )
    if not bands:
        raise ValueError(f"no NAD-band columns for {arch} in the {study} summary")
    columns = {"accuracy": "unchanged"}
    columns |= {f"band_without_{a}_{b}": f"without {a}–{b}" for a, b in bands}
    columns |= {f"band_only_{a}_{b}": f"only {a}–{b}" for a, b in bands}
    order = list(dict.fromkeys(test["variant"]))  # the summary's order (by index, frequency)
    grid = test.groupby("variant", sort=False)[list(columns)].mean().reindex(order) * 100
    values = grid.to_numpy(float)
    fig, ax = plt.subplots(
        figsize=(2.2 + 0.9 * len(columns), 1.8 + 0.32 * len(order)), constrained_layout=True
    )
    im = ax.imshow(values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), list(columns.values()), rotation=35, ha="right")
    ax.set_yticks(range(len(order)), order)
    ax.set_ylabel("model (variant)")
    ax.axvline(0.5, color="white", linewidth=2)
    ax.axvline(0.5 + len(bands), color="white", linewidth=2)
    outcome = (
        test.groupby("variant", sort=False)["outcome"].agg(
            lambda o: DIVERGED if (o == DIVERGED).any() else NOT_FIT
        )
        if "outcome" in test
        else pd.Series(dtype=str)
    )
    why = outcome.reindex(order).fillna("diverged").to_numpy()
    if values.size <= 600:
        for (r, c), v in np.ndenumerate(values):
            label = why[r].replace(" ", "\n", 1) if not np.isfinite(v) else f"{v:.0f}"
            ax.text(
                c,
                r,
                label,
                ha="center",
                va="center",
                fontsize=7,
                color="black" if np.isfinite(v) and v > 60 else "white",
            )
    fig.colorbar(im, ax=ax, label="test accuracy (%)")
    ax.set_title(
        f"{arch} ({study}): test accuracy with the inputs' components along NADs a–b\n"
        f"removed (without) or alone kept (only); {test['seed'].nunique()} seed(s), no retraining",
        fontsize=9,
    )
    return save_figure(fig, output)


FIGURES = {
    f.__name__: f
    for f in (
        nad_bands_figure,
        pair_heatmaps,
        reliance_heatmaps,
        complexity_heatmaps,
        single_direction_figure,
        fourier_figure,
        cifar_nad_figure,
        poison_figure,
        flip_figure,
        cross_section_grid,
    )
}


def draw(
    function: str, inputs: list[str], study: str, arch: str, output: str, source: str = "summary"
) -> None:
    """Draw the figure `function` (named by the study's registry entry: a function of this
    module, or `module:function` for a study of its own) for `arch`, from what its `source`
    names (studies.Figure): the summary's rows, or the models' arrays (one dict per model)."""
    if function in FIGURES:
        draw_it = FIGURES[function]
    else:
        module, _, name = function.partition(":")
        draw_it = getattr(importlib.import_module(module), name)
    if source == "arrays":
        data = [dict(read_artifact(p, lambda q: dict(np.load(q)))) for p in inputs]
    else:
        data = load_parquet(inputs[0])
    draw_it(data, arch, output)
