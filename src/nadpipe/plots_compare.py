"""Figures that compare: a protocol search against its published table (nadpipe.search), and two
runs' cells side by side (nadpipe diff)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .io import load_parquet  # noqa: E402
from .plots import AXIS_I, AXIS_J, save_figure


def search_figure(table: pd.DataFrame, keys: Sequence[str], summary: str, arch: str, output: str):
    """The protocol search (nadpipe.search): left, each protocol's mean |difference| from the
    published table (against the searched key when one numeric key varies, else one bar per
    protocol), its round written beside it; right, the best protocol's cells against the
    published ones."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    fitted = table[np.isfinite(table["mean_abs_diff"].astype(float))]
    varying = [k for k in keys if table[k].nunique() > 1]
    numeric = len(varying) == 1 and all(
        isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in table[varying[0]]
    )
    if numeric:
        key = varying[0]
        line = fitted.sort_values(key)
        left.plot(line[key], line["mean_abs_diff"], "o-", label="mean |difference|")
        left.plot(line[key], line["max_abs_diff"], "v:", color="grey", label="largest")
        for _, row in fitted.iterrows():
            left.annotate(
                f"r{row['round']}",
                (row[key], row["mean_abs_diff"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        best = fitted.iloc[0]
        left.plot([best[key]], [best["mean_abs_diff"]], "*", ms=14, color="C3", label="best")
        left.set_xscale("log")
        values = sorted(fitted[key].unique())
        left.set_xticks(values, [f"{v:g}" for v in values])
        left.minorticks_off()
        left.set_xlabel(key)
        left.legend(fontsize=8)
    else:
        ordered = fitted.iloc[::-1]
        left.barh(ordered["protocol"], ordered["mean_abs_diff"], color="C0")
        left.set_xlabel("mean |difference| (points)")
        for y, (_, row) in enumerate(ordered.iterrows()):
            left.annotate(
                f"r{row['round']}",
                (row["mean_abs_diff"], y),
                xytext=(3, -3),
                textcoords="offset points",
                fontsize=7,
            )
    if numeric:
        left.set_ylabel("|difference| from the published table (points)")
    left.set_title(f"{len(fitted)} protocols in {table['round'].max()} rounds", fontsize=10)
    best = fitted.iloc[0] if len(fitted) else None
    if best is not None:
        df = load_parquet(summary)
        rows = df[(df["arch"] == arch) & (df["protocol"] == best["protocol"])]
        test = rows[(rows["split"] == "test") & rows["reference_accuracy"].notna()]
        test = test[test["condition"] == test["condition"].iloc[0]] if len(test) else test
        cells = test.groupby("variant")[["accuracy", "reference_accuracy"]].mean() * 100
        right.plot([50, 100], [50, 100], "k:", linewidth=0.8, label="equal")
        right.plot(cells["reference_accuracy"], cells["accuracy"], "o", label="a cell")
        right.set_xlabel("published test accuracy (%)")
        right.set_ylabel("nadpipe's test accuracy (%)")
        right.legend(fontsize=8)
        right.set_title(
            f"best: {best['protocol']}\n|Δ| mean {best['mean_abs_diff']:.1f}, max "
            f"{best['max_abs_diff']:.1f} points ({int(best['cells'])} cells)",
            fontsize=9,
        )
    fig.suptitle(f"{arch}: the protocol search against the published table", fontsize=11)
    return save_figure(fig, output)


# -- two runs' cells side by side (nadpipe diff) ----------------------------------------------

# a verdict as the run's summary says it (its `verdict` column; i = j as the findings say it),
# on two lines where it is two words
SHORT = {"lower": "lower", "higher": "higher", "margin": "margin", "same": "i = j",
         "edge": "edge", "tied": "tied", "not learned": "not\nlearned"}  # fmt: skip


def verdict_change(both: pd.DataFrame, names: tuple[str, str], study: str, output: str):
    """Per architecture, every cell (i, j) of a D(v1) ⊕ D(v2) study in two runs A and B
    (nadpipe.folders.cell_pairs): coloured by the change of its learned seeds' mean reliance angle
    (B − A, grey where either learned nothing), written with its verdict, "A -> B" and framed
    where it changed."""
    archs = list(dict.fromkeys(both["arch"]))
    fig, axes = plt.subplots(
        1, len(archs), figsize=(5.2 * len(archs) + 1, 4.8), constrained_layout=True, squeeze=False
    )
    im = None
    for ax, arch in zip(axes[0], archs, strict=True):
        part = both[both["arch"] == arch].assign(
            change=lambda d: d["reliance_mean_b"] - d["reliance_mean_a"]
        )
        grid = part.pivot_table(index="nad_i", columns="nad_j", values="change", dropna=False)
        im = ax.imshow(grid.to_numpy(float), origin="lower", cmap="RdBu_r", vmin=-90, vmax=90)
        ax.set_facecolor("0.85")
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
        ax.set(xlabel=AXIS_J, ylabel=AXIS_I, title=arch)
        rows, cols = list(grid.index), list(grid.columns)
        for r in part.itertuples():
            y, x = rows.index(r.nad_i), cols.index(r.nad_j)
            moved = r.verdict_a != r.verdict_b
            said = f"{SHORT[r.verdict_a]}\n→ {SHORT[r.verdict_b]}" if moved else SHORT[r.verdict_a]
            change = f"\n{r.change:+.0f}°" if abs(r.change) >= 0.5 else ""  # NaN: no change
            ax.text(x, y, said + change, ha="center", va="center", fontsize=8,
                    fontweight="bold" if moved else "normal")  # fmt: skip
            if moved:
                ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, lw=2.5,
                                           edgecolor="black"))  # fmt: skip
    fig.colorbar(im, ax=list(axes[0]), label="reliance angle, B − A (degrees)", shrink=0.8)
    title = f"{study}: {names[0]} (A) -> {names[1]} (B), each cell's verdict; framed: it changed"
    width = int(fig.get_figwidth() * 11)  # characters of 11-point text the figure holds
    fig.suptitle(textwrap.fill(title, width), fontsize=11)
    return save_figure(fig, output)
