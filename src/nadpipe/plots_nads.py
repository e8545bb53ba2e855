"""The NAD figure of an architecture: its NADs as images, their spectrum, and whether they
converged."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from .convergence import networks
from .convergence import verdict as convergence
from .io import load_torch  # noqa: E402
from .log import warn
from .plots import no_axes, save_figure

# -- NADs -------------------------------------------------------------------------------------


def _image(v: np.ndarray) -> tuple[np.ndarray, dict]:
    """An image of a NAD (C, H, W) scaled by its largest |value| to [-1, 1]: one channel on a
    diverging scale, colour NADs as RGB (grey = 0)."""
    v = v / (np.abs(v).max() or 1.0)
    if v.shape[0] == 1:
        return v[0], {"cmap": "BrBG", "vmin": -1, "vmax": 1}
    return np.moveaxis(v[:3] / 2 + 0.5, 0, -1), {}


def _spectrum(ax, art: dict, shape: tuple) -> str:
    """The eigenvalues up to the covariance's rank (those past it are rounding noise, spanning
    many decades), and the largest eigenvalue an isotropic covariance from as many networks
    shows; returns the panel's title."""

    ev = art["eigenvalues"].numpy()
    s = art["settings"]
    rank = min(len(ev), networks(art) * s["n_points"] - 1)
    ax.semilogy(np.arange(rank), np.clip(ev[:rank], 1e-300, None), label="eigenvalue")
    iso = art.get("isotropy")
    if iso:
        mean = ev[0] / iso["top_over_mean"]
        ax.axhline(
            mean * iso["isotropic_edge"],
            color="grey",
            linestyle=":",
            label="largest eigenvalue of an isotropic covariance from as many networks",
        )
    if rank < int(np.prod(shape)):
        ax.axvline(
            rank, color="red", linestyle="--", label=f"rank {rank}: NADs from here on are arbitrary"
        )
        ax.set_xlim(0, len(ev))
    ax.set_xlabel("NAD index")
    ax.set_ylabel("eigenvalue (log scale)")
    ax.legend(fontsize=8, loc="upper right")
    sh = art["split_half"]
    overlaps = ", ".join(
        f"k={k}: {v:.2f}" if math.isfinite(v) else f"k={k}: n/a (rank)"
        for k, v in sh["overlap"].items()
    )
    title = f"spectrum; split-half overlap ({sh['halves'][0]} vs {sh['halves'][1]} nets) {overlaps}"
    if iso:
        title += f"; anisotropy {iso['anisotropy']:.2f} (isotropic ≈ 1)"
    return title


def _nad_panels(fig, grid, vecs: np.ndarray, power: np.ndarray, rows: int) -> None:
    """Each NAD over its Fourier power (one shared log scale), 8 to a row of `grid`; for colour
    NADs, NAD 0's channels side by side in the last row."""
    shape = vecs.shape[1:]
    colour = shape[0] > 1
    n = len(vecs)
    top = float(power.max()) or 1.0
    shared = LogNorm(top * 1e-3, top)  # one scale for every panel, three decades
    for k in range(n):
        r, c = 2 * (k // 8), k % 8
        ax = fig.add_subplot(grid[r, c])
        img, kw = _image(vecs[k])
        nad_im = ax.imshow(img, **kw)
        ax.set_title(f"NAD {k}" + (" (RGB)" if colour else ""), fontsize=9)
        no_axes(ax)
        ax = fig.add_subplot(grid[r + 1, c])
        power_im = ax.imshow(np.maximum(power[k], top * 1e-3), cmap="magma", norm=shared)
        ax.set_title("|FFT|², zero freq. centred", fontsize=7)
        no_axes(ax)
    if not colour:
        fig.colorbar(nad_im, cax=fig.add_subplot(grid[0, 8]), label="NAD / its max |value|")
    fig.colorbar(power_im, cax=fig.add_subplot(grid[1, 8]), label="share of its energy (log)")
    if colour:  # the channels of NAD 0 side by side
        v0 = vecs[0] / (np.abs(vecs[0]).max() or 1.0)
        for ch in range(min(shape[0], 8)):
            ax = fig.add_subplot(grid[rows - 1, ch])
            ch_im = ax.imshow(v0[ch], cmap="BrBG", vmin=-1, vmax=1)
            ax.set_title(f"NAD 0, channel {ch}", fontsize=8)
            no_axes(ax)
        fig.colorbar(ch_im, cax=fig.add_subplot(grid[rows - 1, 8]), label="/ max |value|")


def nad_figure(art: dict, arch: str, output: str, min_overlap: float, raise_networks: str = ""):
    """The first 16 NADs (colour NADs as RGB images and their channels) and their Fourier power
    on shared, labelled scales, the eigenvalue spectrum and the split-half overlaps; a "not
    converged" stamp on the figure when the NADs are not converged (nadpipe.nads.verdict).
    `raise_networks` is how the caller says to use more networks. Returns (a one-line verdict,
    the figure); the verdict starts with "WARNING: " when it is worth one."""

    shape = tuple(art.get("shape") or (1, 32, 32))
    n = min(16, len(art["vectors"]))
    vecs = art["vectors"][:n].reshape(n, *shape).numpy()
    power = np.abs(np.fft.fftshift(np.fft.fft2(vecs), axes=(-2, -1))) ** 2
    power = power.sum(1)  # (n, H, W): summed over channels
    power /= power.sum((1, 2), keepdims=True)  # each NAD's share of its energy per frequency
    colour = shape[0] > 1
    spectrum = art.get("eigenvalues") is not None
    rows = 2 * math.ceil(n / 8) + (1 if colour else 0)
    fig = plt.figure(figsize=(17, 2.1 * rows + (3.6 if spectrum else 0.8)), constrained_layout=True)
    grid = fig.add_gridspec(
        rows + spectrum,
        9,
        width_ratios=[1] * 8 + [0.12],
        height_ratios=[1] * rows + ([1.8] if spectrum else []),
    )
    _nad_panels(fig, grid, vecs, power, rows)
    dims = "x".join(map(str, shape))
    if not spectrum:
        fig.suptitle(f"{arch}: NADs read from {art.get('file')} (inputs {dims})")
        return f"NADs of {arch} (read from a file: no spectrum)", save_figure(fig, output)
    s = art["settings"]
    ax = fig.add_subplot(grid[rows, :8])
    ax.set_title(_spectrum(ax, art, shape), fontsize=9)
    raise_networks = raise_networks or f"raise nads.n_networks (now {networks(art)})"
    kind, text = convergence(art, min_overlap, raise_networks)
    fig.suptitle(
        f"{arch}: NADs ({s['estimator']}, step {s['step']}, {networks(art)} networks, "
        f"{s['n_points']} point(s), inputs {dims})"
    )
    if kind in ("not converged", "unknown"):
        top10 = art["split_half"]["overlap"].get(10, float("nan"))
        stamp = (
            f"not converged: top-10 overlap {top10:.2f} < {min_overlap}"
            if kind == "not converged"
            else "convergence unknown: too few networks"
        )
        fig.text(
            0.5,
            0.5,
            stamp,
            ha="center",
            va="center",
            fontsize=22,
            color="red",
            alpha=0.55,
            rotation=12,
            weight="bold",
        )
        return f"WARNING: NADs of {arch}: {text}", save_figure(fig, output)
    return f"NADs of {arch}: {text}", save_figure(fig, output)


def nad_figure_job(artifact: str, arch: str, output: str, min_overlap: float) -> str:
    """The NAD figure of the artifact at `artifact`; a warning in the job log when the NADs
    are not converged (repeated at the end of the run)."""

    verdict, _ = nad_figure(load_torch(artifact), arch, output, min_overlap)
    if verdict.startswith("WARNING: "):
        warn(verdict.removeprefix("WARNING: "))
    return verdict
