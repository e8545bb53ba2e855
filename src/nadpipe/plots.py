"""Figures: accuracy heatmaps over NAD-index pairs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .io import atomic_write  # noqa: E402

PANELS = {
    "both": "both channels (in distribution)",
    "ch1_only": "channel 1 only (ch. 2 zeroed)",
    "ch2_only": "channel 2 only (ch. 1 zeroed)",
}


def pair_grid(df: pd.DataFrame, condition: str, split: str = "test") -> pd.DataFrame:
    """Mean accuracy over seeds, rows = NAD index i of v1, columns = NAD index j of v2."""
    sel = df[(df["split"] == split) & (df["condition"] == condition)]
    return sel.pivot_table(index="nad_i", columns="nad_j", values="accuracy", aggfunc="mean")


def pair_heatmaps(df: pd.DataFrame, arch: str, output: str) -> None:
    """Three panels (both / ch1 only / ch2 only) of mean test accuracy for one architecture."""
    df = df[df["arch"] == arch]
    if df.empty:
        raise ValueError(f"no rows for architecture {arch!r}")
    n_seeds = df["seed"].nunique()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), constrained_layout=True)
    for ax, (cond, title) in zip(axes, PANELS.items(), strict=True):
        grid = pair_grid(df, cond) * 100
        im = ax.imshow(grid.to_numpy(), vmin=50, vmax=100, cmap="viridis", origin="lower")
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
        ax.set_xlabel("NAD index of v2 (channel 2, eps2)")
        ax.set_ylabel("NAD index of v1 (channel 1, eps1)")
        ax.set_title(title)
        for (r, c), val in np.ndenumerate(grid.to_numpy()):
            if np.isfinite(val):
                ax.text(
                    c,
                    r,
                    f"{val:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if val < 80 else "black",
                )
    fig.colorbar(im, ax=axes, label="test accuracy (%)", shrink=0.9)
    fig.suptitle(f"{arch}: D(v1) (+) D(v2), mean over {n_seeds} seed(s)")
    atomic_write(output, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
