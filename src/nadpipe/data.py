"""Input shapes, the synthetic distribution D(v), and checksums of a study's tensors.

D(v): x = eps * y * v + w, w ~ N(0, sigma^2 (I - v v^T)), y in {-1, +1} balanced, |v| = 1. The
data are linearly separable along v only. Everything is drawn on the CPU in float64 from seeded
generators, so the same spec gives the same bytes on every machine and device; jobs rebuild a
study's tensors from its small spec and check them against the checksum recorded at training.
"""

from __future__ import annotations

import hashlib
import math

import torch

from .settings import Shape

Splits = dict[str, tuple[torch.Tensor, torch.Tensor]]  # "train"/"test" -> (x, y)
__all__ = ["Shape", "Splits"]


def balanced_labels(n: int, gen: torch.Generator) -> torch.Tensor:
    """(n,) labels in {-1, +1}: n // 2 of -1, the rest +1, in random order."""
    y = torch.ones(n)
    y[: n // 2] = -1
    return y[torch.randperm(n, generator=gen)]


def sample_dv(
    v: torch.Tensor, y: torch.Tensor, eps: float, sigma: float, gen: torch.Generator
) -> torch.Tensor:
    """(n, d) samples of D(v) for labels `y` (n,): eps * y * v plus noise orthogonal to v."""
    v = v.flatten().double() / v.double().norm()
    g = torch.randn(len(y), v.numel(), generator=gen, dtype=torch.float64) * sigma
    w = g - (g @ v)[:, None] * v[None, :]  # project out v: covariance sigma^2 (I - v v^T)
    return (eps * y.double()[:, None] * v[None, :] + w).float()


def dv_splits(
    v: torch.Tensor, shape: Shape, eps: float, sigma: float, sizes: dict[str, int], gen
) -> Splits:
    """{"train": (x (n, *shape), y (n,) in {0, 1}), "test": ...} drawn from D(v)."""
    out = {}
    for split, n in sizes.items():
        y = balanced_labels(n, gen)
        x = sample_dv(v, y, eps, sigma, gen)
        out[split] = (x.reshape(n, *shape), ((y + 1) / 2).long())
    return out


def pair_splits(
    v1: torch.Tensor,
    v2: torch.Tensor,
    shape: Shape,
    eps1: float,
    eps2: float,
    sigma: float,
    sizes: dict[str, int],
    gen: torch.Generator,
) -> Splits:
    """D(v1) (+) D(v2) with one label: x (n, 2C, H, W), channels 0..C-1 from D(v1), C..2C-1
    from D(v2) (C, H, W = `shape`, the NADs' shape); y (n,) in {0, 1}."""
    out = {}
    for split, n in sizes.items():
        y = balanced_labels(n, gen)
        x1 = sample_dv(v1, y, eps1, sigma, gen).reshape(n, *shape)
        x2 = sample_dv(v2, y, eps2, sigma, gen).reshape(n, *shape)
        out[split] = (torch.cat([x1, x2], dim=1), ((y + 1) / 2).long())
    return out


def checksum(splits: Splits) -> str:
    """sha256 over the splits' tensors in a fixed order."""
    h = hashlib.sha256()
    for split in sorted(splits):
        for t in splits[split]:
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def fourier_direction(a: int, b: int, shape: Shape) -> torch.Tensor:
    """(C, H, W) the real 2-D DFT direction of frequency (a, b), cos(2 pi (a r / H + b c / W)),
    the same in every channel, unit norm. Negative frequencies are the centred layout's
    (cos is even, so (-a, -b) is the direction of (a, b), as in any centred spectrum)."""
    rows, cols = (torch.arange(n, dtype=torch.float64) for n in shape.size)
    r, c = torch.meshgrid(rows, cols, indexing="ij")
    v = torch.cos(2 * math.pi * (a * r / shape.h + b * c / shape.w))
    v = v.expand(shape.c, shape.h, shape.w)
    return (v / v.norm()).float().contiguous()
