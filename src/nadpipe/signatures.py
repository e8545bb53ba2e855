"""Architecture signatures: how similar the NADs of two architectures are, and how
low-frequency each one's are. Reads the NAD bases (results/nads/{arch}.npy) only.

- pairwise: the subspace overlap ||U_k V_k^T||_F^2 / k of the first k NADs of two architectures
  with inputs of one size (1 = the same subspace, about k/d = unrelated);
- Fourier: the fraction of the energy of an architecture's first k NADs at the k lowest spatial
  frequencies (by radius, every channel alike): 1 = all of it, about k/d for random directions.
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
import pandas as pd

from .bases import subspace_overlap
from .io import atomic_write

LOW = "low_frequencies"  # arch_b of the rows that say how low-frequency arch_a's NADs are

KS = (10, 50, 100)


def _n_lowest(shape: tuple[int, int, int], k: int) -> int:
    """How many of the lowest spatial frequencies of every channel count as the k lowest."""
    c, h, w = shape
    return min(math.ceil(k / c), h * w)


def low_frequency_share(v: np.ndarray, shape: tuple[int, int, int], k: int) -> float:
    """Fraction of the energy of the first k rows of `v` (k, C*H*W) in the k lowest spatial
    frequencies: with C channels, the ceil(k / C) lowest frequencies of every channel."""
    c, h, w = shape
    coef = np.fft.fft2(v[:k].reshape(k, c, h, w), norm="ortho")  # Parseval: energy preserved
    fa, fb = np.fft.fftfreq(h) * h, np.fft.fftfreq(w) * w
    radius = np.sqrt(fa[:, None] ** 2 + fb[None, :] ** 2).ravel()
    lowest = np.argsort(radius, kind="stable")[: _n_lowest(shape, k)]
    energy = np.abs(coef.reshape(k, c, h * w)) ** 2
    return float(energy[:, :, lowest].sum() / energy.sum())


def chance_share(shape: tuple[int, int, int], k: int) -> float:
    """The low-frequency share of k random directions, on average: the fraction of the d
    coordinates that `low_frequency_share` counts as low."""
    _, h, w = shape
    return _n_lowest(shape, k) / (h * w)


def signatures(bases: dict[str, np.ndarray], shapes: dict[str, tuple], ks=KS) -> pd.DataFrame:
    """One row per (arch_a, arch_b, k): the overlap of their first k NADs (arch_b LOW:
    the low-frequency share of arch_a's), and `chance`, what unrelated (random) directions
    give on average: k/d for an overlap."""
    rows = []
    for a, b in itertools.combinations_with_replacement(sorted(bases), 2):
        if bases[a].shape[1] != bases[b].shape[1]:
            continue  # inputs of other sizes: no common space
        for k in ks:
            if k <= min(len(bases[a]), len(bases[b])):
                value = subspace_overlap(bases[a], bases[b], k)
                chance = k / bases[a].shape[1]
                rows += [{"arch_a": a, "arch_b": b, "k": k, "overlap": value, "chance": chance}]
                if a != b:
                    rows += [{"arch_a": b, "arch_b": a, "k": k, "overlap": value, "chance": chance}]
    for a in sorted(bases):
        for k in ks:
            if k <= len(bases[a]):
                share = low_frequency_share(bases[a], shapes[a], k)
                chance = chance_share(shapes[a], k)
                rows.append(
                    {"arch_a": a, "arch_b": LOW, "k": k, "overlap": share, "chance": chance}
                )
    return pd.DataFrame(rows, columns=["arch_a", "arch_b", "k", "overlap", "chance"])


def signature_figure(df: pd.DataFrame, output: str):
    # deferred: it loads matplotlib, which importing signatures does not
    import matplotlib

    matplotlib.use("Agg")
    # deferred: it loads matplotlib, which importing signatures does not
    import matplotlib.pyplot as plt

    from .plots import save_figure

    ks = sorted(df["k"].unique())
    pairs = df[df["arch_b"] != LOW]
    archs = sorted(set(pairs["arch_a"]))
    fig, axes = plt.subplots(
        1, len(ks) + 1, figsize=(4.6 * (len(ks) + 1), 4.4), constrained_layout=True, squeeze=False
    )
    for ax, k in zip(axes[0], ks, strict=False):
        grid = (
            pairs[pairs["k"] == k]
            .pivot_table(index="arch_a", columns="arch_b", values="overlap")
            .reindex(index=archs, columns=archs)
        )
        im = ax.imshow(grid.to_numpy(float), vmin=0, vmax=1, cmap="viridis")
        for (r, c), v in np.ndenumerate(grid.to_numpy(float)):
            text, colour = (
                (f"{v:.2f}", "white" if v < 0.6 else "black")
                if np.isfinite(v)
                else ("other\ninput size", "grey")
            )
            ax.text(c, r, text, ha="center", va="center", fontsize=7, color=colour)
        ax.set_xticks(range(len(archs)), archs, rotation=45, ha="right")
        ax.set_yticks(range(len(archs)), archs)
        ax.set_title(f"overlap of the first {k} NADs")
    fig.colorbar(im, ax=list(axes[0][: len(ks)]), label="subspace overlap ‖UₖVₖᵀ‖²/k", shrink=0.8)
    ax = axes[0][-1]
    low = df[df["arch_b"] == LOW]
    width = 0.8 / max(len(ks), 1)
    names = sorted(low["arch_a"].unique())
    for n, k in enumerate(ks):
        rows = low[low["k"] == k].set_index("arch_a").reindex(names)
        x = np.arange(len(names)) + n * width
        ax.bar(x, rows["overlap"], width, label=f"first {k} NADs")
        # what k random directions give (about k/d; d differs between architectures)
        ax.hlines(
            rows["chance"],
            x - width / 2,
            x + width / 2,
            colors="black",
            linestyles="--",
            label="random directions (chance)" if n == 0 else None,
        )
    ax.set_xticks(np.arange(len(names)) + width * (len(ks) - 1) / 2, names, rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("energy share at the k lowest frequencies")
    ax.set_title("how low-frequency the first NADs are")
    ax.legend(fontsize=8)
    fig.suptitle("Architecture signatures (1 = the same subspace; about k/d = unrelated)")
    return save_figure(fig, output)


def signatures_job(npy: list[str], archs: list[str], shapes: list, table: str, figure: str) -> None:
    bases = {a: np.load(p) for a, p in zip(archs, npy, strict=True)}
    df = signatures(bases, {a: tuple(s) for a, s in zip(archs, shapes, strict=True)})
    atomic_write(table, partial(df.to_parquet, index=False))
    signature_figure(df, figure)
