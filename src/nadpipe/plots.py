"""Figures: heatmaps over NAD-index pairs and decision-boundary cross-sections."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from .io import atomic_write  # noqa: E402

PANELS = {
    "both": "both channels (in distribution)",
    "ch1_only": "channel 1 only (ch. 2 zeroed)",
    "ch2_only": "channel 2 only (ch. 1 zeroed)",
}
AXIS_I = "NAD index of v1 (channel 1, eps1)"
AXIS_J = "NAD index of v2 (channel 2, eps2)"


def pair_grid(df: pd.DataFrame, condition: str, split: str = "test", value: str = "accuracy"):
    """Mean of `value` over seeds, rows = NAD index i of v1, columns = NAD index j of v2."""
    sel = df[(df["split"] == split) & (df["condition"] == condition)]
    # dropna=False keeps cells whose every seed is NaN (diverged), so they are drawn and marked
    return sel.pivot_table(
        index="nad_i", columns="nad_j", values=value, aggfunc="mean", dropna=False
    )


def _rows_of(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    df = df[df["arch"] == arch]
    if df.empty:
        raise ValueError(f"no rows for architecture {arch!r}")
    return df


def _number(val: float, fmt: str) -> str:
    return (
        f"{val:.0f}"
        if fmt == "auto" and abs(val) >= 100
        else format(val, ".3g" if fmt == "auto" else fmt)
    )


def diverged_grid(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per (i, j): whether any seed's training diverged; None when the column is absent."""
    if "diverged" not in df:
        return None
    return df.pivot_table(index="nad_i", columns="nad_j", values="diverged", aggfunc="max")


def _panel(
    ax, grid: pd.DataFrame, title: str, fmt: str, marks: pd.DataFrame | None = None, **imshow
) -> matplotlib.image.AxesImage:
    vals = grid.to_numpy(dtype=float)
    im = ax.imshow(vals, origin="lower", **imshow)
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
    ax.set_xlabel(AXIS_J)
    ax.set_ylabel(AXIS_I)
    ax.set_title(title)
    lo, hi = im.get_clim()
    for (r, c), val in np.ndenumerate(vals):
        if np.isfinite(val):
            light = (val - lo) < 0.6 * (hi - lo)
            ax.text(c, r, _number(val, fmt), ha="center", va="center", fontsize=8,
                    color="white" if light else "black")  # fmt: skip
    if marks is not None:  # hatch the cells where a seed's training diverged
        for (r, c), bad in np.ndenumerate(marks.reindex_like(grid).fillna(False).to_numpy(bool)):
            if bad:
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="xx",
                                       edgecolor="red", linewidth=0))  # fmt: skip
    return im


def _divergence_note(marks: pd.DataFrame | None) -> str:
    n = 0 if marks is None else int(marks.to_numpy(dtype=float).sum())
    return f"; red hatching: training diverged in some seed ({n} cells)" if n else ""


def _save(fig, output: str) -> None:
    atomic_write(output, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def pair_heatmaps(df: pd.DataFrame, arch: str, output: str) -> None:
    """Three panels (both / ch1 only / ch2 only) of mean test accuracy for one architecture."""
    df = _rows_of(df, arch)
    marks = diverged_grid(df)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), constrained_layout=True)
    for ax, (cond, title) in zip(axes, PANELS.items(), strict=True):
        grid = pair_grid(df, cond) * 100
        im = _panel(ax, grid, title, ".0f", marks, vmin=50, vmax=100, cmap="viridis")
    fig.colorbar(im, ax=axes, label="test accuracy (%)", shrink=0.9)
    seeds = df["seed"].nunique()
    fig.suptitle(f"{arch}: D(v1) (+) D(v2), mean over {seeds} seed(s){_divergence_note(marks)}")
    _save(fig, output)


def metric_heatmaps(
    df: pd.DataFrame, arch: str, metrics: dict[str, str], output: str, limits: dict | None = None
) -> None:
    """One panel per per-model metric column (mean over seeds), each with its own colour bar."""
    df = _rows_of(df, arch)
    marks = diverged_grid(df)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5 * len(metrics), 4.8), constrained_layout=True
    )
    for ax, (col, title) in zip(np.atleast_1d(axes), metrics.items(), strict=True):
        grid = pair_grid(df, "both", value=col)
        lims = (limits or {}).get(col, {})
        fmt = ".0f" if col == "reliance_deg" else "auto"
        im = _panel(ax, grid, title, fmt, marks, cmap="magma", **lims)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"{arch}: mean over {df['seed'].nunique()} seed(s){_divergence_note(marks)}")
    _save(fig, output)


def cross_section_grid(sections: Sequence[dict], arch: str, output: str) -> None:
    """Decision boundary (zero contour of f) in the plane of v1 (+) 0 and 0 (+) v2 at the first
    stored test point of each (i, j), one panel per pair: rows i, columns j."""
    by_pair = {(int(s["nad_i"]), int(s["nad_j"])): s for s in sections}
    rows = sorted({i for i, _ in by_pair}, reverse=True)  # v1's index grows upwards, as in heatmaps
    cols = sorted({j for _, j in by_pair})
    fig, axes = plt.subplots(
        len(rows), len(cols), figsize=(2.4 * len(cols) + 1, 2.4 * len(rows) + 0.6),
        squeeze=False, constrained_layout=True,
    )  # fmt: skip
    for r, i in enumerate(rows):
        for c, j in enumerate(cols):
            ax = axes[r][c]
            s = by_pair.get((i, j))
            if s is None:
                ax.axis("off")
                continue
            f = s["values"][0]  # (R, R): rows along v2 (b), columns along v1 (a)
            if not np.isfinite(f).all():
                ax.text(0.5, 0.5, "diverged", ha="center", va="center", color="red")
                ax.set_title(f"i={i}, j={j}", fontsize=9)
                continue
            lim = np.abs(f).max() or 1.0
            ax.pcolormesh(s["a"], s["b"], f, cmap="RdBu_r", vmin=-lim, vmax=lim, shading="auto")
            if f.min() < 0 < f.max():
                ax.contour(s["a"], s["b"], f, levels=[0], colors="k", linewidths=1.2)
            ax.plot([1, -1], [1, -1], "o", ms=3, color="k")  # class means: (eps1, eps2), negated
            ax.set_title(f"i={i}, j={j}", fontsize=9)
            ax.set_aspect("equal")
            if r == len(rows) - 1:
                ax.set_xlabel("along v1 (+) 0, units of eps1", fontsize=8)
            if c == 0:
                ax.set_ylabel("along 0 (+) v2, units of eps2", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(
        f"{arch}: decision boundary (black) through a test point; red f > 0 (class +1); "
        "vertical boundary = uses channel 1, horizontal = channel 2",
        fontsize=9,
    )
    _save(fig, output)


# the per-model figures of the NAD-pair study: columns of summary.parquet and panel titles
FIGURES = {
    "reliance": {
        "metrics": {
            "reliance_deg": "channel reliance (deg): 0 = v1, 90 = v2",
            "margin_v1": "median margin along v1 (+) 0",
            "margin_v2": "median margin along 0 (+) v2",
        },
        "limits": {"reliance_deg": {"vmin": 0, "vmax": 90}},
    },
    "complexity": {
        "metrics": {
            "jacobian_norm_test": "Jacobian norm of softmax (test)",
            "transitions_same_class": "transitions, same-class ellipses",
            "transitions_diff_class": "transitions, different-class ellipses",
            "transitions_random": "transitions, random ellipses",
        },
    },
}


def nad_figure(art: dict, arch: str, output: str, min_overlap: float) -> str:
    """The first 16 NADs, their centred Fourier power, the eigenvalue spectrum and the
    split-half overlaps; returns a one-line verdict on convergence."""
    vecs = art["vectors"][:16].reshape(16, 32, 32).numpy()
    power = np.abs(np.fft.fftshift(np.fft.fft2(vecs), axes=(1, 2))) ** 2
    fig = plt.figure(figsize=(16, 10), constrained_layout=True)
    grid = fig.add_gridspec(5, 8, height_ratios=[1, 1, 1, 1, 1.6])
    for k in range(16):
        r, c = 2 * (k // 8), k % 8
        ax = fig.add_subplot(grid[r, c])
        lim = np.abs(vecs[k]).max()
        ax.imshow(vecs[k], cmap="BrBG", vmin=-lim, vmax=lim)
        ax.set_title(f"NAD {k}", fontsize=9)
        ax.axis("off")
        ax = fig.add_subplot(grid[r + 1, c])
        ax.imshow(power[k], cmap="magma")
        ax.set_title("|FFT|^2", fontsize=8)
        ax.axis("off")
    ax = fig.add_subplot(grid[4, :])
    ax.semilogy(art["eigenvalues"].numpy())
    rank = min(
        len(art["eigenvalues"]), art["settings"]["n_networks"] * art["settings"]["n_points"] - 1
    )
    if rank < len(art["eigenvalues"]):
        ax.axvline(rank, color="red", linestyle="--")
        ax.text(rank, ax.get_ylim()[1], f" rank {rank}: NADs past it are arbitrary", color="red",
                va="top", fontsize=9)  # fmt: skip
    ax.set_xlabel("NAD index")
    ax.set_ylabel("eigenvalue")
    sh = art["split_half"]
    overlaps = ", ".join(f"k={k}: {v:.2f}" for k, v in sh["overlap"].items())
    s = art["settings"]
    ax.set_title(
        f"spectrum; split-half overlap ({sh['halves'][0]} vs {sh['halves'][1]} nets) {overlaps}; "
        f"top-10 eigenvalues differ by up to {100 * sh['eigenvalue_rel_diff_top10']:.0f} % "
        "of the top one",
        fontsize=9,
    )
    fig.suptitle(
        f"{arch}: NADs ({s['estimator']}, step {s['step']}, {s['n_networks']} networks, "
        f"{s['n_points']} point(s))"
    )
    _save(fig, output)
    top10 = sh["overlap"].get(10, float("nan"))
    verdict = f"NADs of {arch}: split-half top-10 overlap {top10:.2f}"
    if top10 < min_overlap:
        verdict = (
            f"WARNING: {verdict} < nads.min_overlap_top10 = {min_overlap}: not converged, "
            f"raise nads.n_networks (now {s['n_networks']}), unless the architecture is nearly "
            "isotropic (a flat spectrum, as an MLP's): then no order of its NADs exists to find"
        )
    return verdict


# -- the CIFAR-10 studies -------------------------------------------------------------------

CIFAR_LINES = {
    "all": "all 4 channels",
    "cifar_only": "CIFAR only (synthetic zeroed)",
    "synthetic_only": "synthetic only (CIFAR zeroed)",
}


def _line_over_seeds(ax, sel: pd.DataFrame, x: str, y: str, label: str, scale: float = 1) -> None:
    """Mean over seeds as a line with markers, min..max over seeds as a band."""
    stats = sel.groupby(x)[y].agg(["mean", "min", "max"]).sort_index() * scale
    line = ax.plot(stats.index, stats["mean"], marker="o", label=label)[0]
    ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2, color=line.get_color())


def _nad_axis(ax, values: pd.Series) -> None:
    """A symlog NAD-index axis from 0 with round, non-overlapping tick labels."""
    top = float(values.max())
    ax.set_xscale("symlog", linthresh=10)
    ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= max(top, 1)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlim(-0.3, max(top, 1) * 1.15)


def rank_correlation(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rank correlation (Pearson's of the ranks, ties averaged)."""
    return float(x.rank().corr(y.rank()))


def study_figure(df: pd.DataFrame, study: str, arch: str, output: str) -> None:
    """One architecture's figure of a per-model study: lines over the NAD index (cifar_nad,
    poison, single_direction), original against flipped (flip), or a map over frequencies
    (fourier); mean over seeds, band = min..max."""
    df = _rows_of(df, arch)
    seeds = df["seed"].nunique()
    test = df[df["split"] == "test"]
    if study == "cifar_nad":
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
        for cond, label in CIFAR_LINES.items():
            _line_over_seeds(ax, test[test["condition"] == cond], "nad_k", "accuracy", label, 100)
        ax.set_xlabel("NAD index k of v (synthetic channel)")
        ax.set_ylabel("test accuracy (%)")
        ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
        ax.legend()
        _nad_axis(ax, test["nad_k"])
        per_model = test[test["condition"] == "all"]
        _line_over_seeds(ax2, per_model, "nad_k", "v_vs_cifar_reliance_deg", "reliance")
        ax2.set_ylim(0, 90)
        ax2.set_xlabel("NAD index k of v")
        ax2.set_ylabel("degrees (0 = only v, 90 = only CIFAR channels)")
        ax2.set_title("input gradient: along v against the CIFAR channels")
        _nad_axis(ax2, test["nad_k"])
        fig.suptitle(f"{arch}: binary CIFAR-10 (+) D(NAD k), mean over {seeds} seed(s)")
    elif study == "poison":
        fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
        _line_over_seeds(ax, test, "nad_i", "accuracy", "clean test set", 100)
        train = df[df["split"] == "train"]
        _line_over_seeds(ax, train, "nad_i", "accuracy", "poisoned training set", 100)
        ax.set_xlabel("poisoned NAD index i (carriers along NADs i, i+1)")
        ax.set_ylabel("accuracy (%)")
        ax.axhline(10, color="grey", linewidth=0.8, linestyle=":")
        ax.legend()
        _nad_axis(ax, test["nad_i"])
        fig.suptitle(f"{arch}: CIFAR-10 poisoned along NADs, mean over {seeds} seed(s)")
    elif study == "flip":
        fig, ax = plt.subplots(figsize=(5, 4.5), constrained_layout=True)
        names = ["original", "flipped"]
        for pos, name in enumerate(names):
            acc = test[test["representation"] == name]["accuracy"].to_numpy() * 100
            ax.bar(pos, np.nanmean(acc) if len(acc) else np.nan, color=f"C{pos}", alpha=0.7)
            ax.scatter(np.full(len(acc), pos), acc, color="black", zorder=3, s=12)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("test accuracy (%)")
        fig.suptitle(f"{arch}: CIFAR-10 in the NAD basis, reversed; {seeds} seed(s)")
    elif study == "single_direction":
        fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
        _line_over_seeds(ax, test, "nad_k", "accuracy", "test accuracy", 100)
        ax.set_xlabel("NAD index k of v")
        ax.set_ylabel("test accuracy (%)")
        ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
        _nad_axis(ax, test["nad_k"])
        rho = rank_correlation(test["nad_k"], test["accuracy"])
        fig.suptitle(f"{arch}: trained on D(NAD k), {seeds} seed(s); Spearman rho = {rho:.2f}")
    elif study == "fourier":
        grid = test.pivot_table(index="freq_a", columns="freq_b", values="accuracy") * 100
        fig, ax = plt.subplots(figsize=(6.5, 5.5), constrained_layout=True)
        im = ax.imshow(grid.to_numpy(), vmin=50, vmax=100, cmap="viridis", origin="upper")
        ax.set_xlabel("frequency b (columns)")
        ax.set_ylabel("frequency a (rows)")
        fig.colorbar(im, ax=ax, label="test accuracy (%)")
        fig.suptitle(f"{arch}: trained on D(Fourier direction (a, b)), {seeds} seed(s)")
    else:
        raise ValueError(f"unknown study {study!r}")
    _save(fig, output)
