"""The NAD paper's validation studies: train on one D(v) and see how well each direction is
learned.

- `single_direction`: v = NAD k of the architecture, for k over a list spanning 0..1023.
- `fourier`: v = the real 2-D DFT direction of frequency (a, b), a, b = 0..size-1 (the
  size x size lowest frequencies), cos(2 pi (a r + b c) / 32) over pixel (r, c), unit norm.

Convention: x = eps * y * v + w, w ~ N(0, sigma^2 (I - v v^T)), y in {-1, +1} (nadpipe's D(v));
the NAD paper writes x = +-(eps'/2) v + w, so eps here is the paper's eps' / 2.
"""

from __future__ import annotations

import math

import torch

from .data import SIDE, balanced_labels, sample_dv
from .io import generator

STUDIES = ("single_direction", "fourier")
SHAPES = {study: (1, 2) for study in STUDIES}
CONDITIONS = {study: {"all": (0,)} for study in STUDIES}


def fourier_direction(a: int, b: int) -> torch.Tensor:
    """(1024,) the real DFT direction of frequency (a, b) on the 32 x 32 grid, unit norm."""
    r, c = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    v = torch.cos(2 * math.pi * (a * r + b * c) / SIDE).double().flatten()
    return (v / v.norm()).float()


def variants(study: str, cfg_study: dict) -> list[str]:
    if study == "single_direction":
        return [f"k{k}" for k in cfg_study["indices"]]
    size = cfg_study["size"]
    return [f"f{a}_{b}" for a in range(size) for b in range(size)]


def variant_columns(study: str, variant: str) -> dict:
    if study == "single_direction":
        return {"nad_k": int(variant[1:])}
    a, b = variant[1:].split("_")
    return {"freq_a": int(a), "freq_b": int(b)}


def direction(study: str, variant: str, vectors: torch.Tensor | None) -> torch.Tensor:
    if study == "single_direction":
        return vectors[int(variant[1:])]
    cols = variant_columns(study, variant)
    return fourier_direction(cols["freq_a"], cols["freq_b"])


def study_data(
    study: str, variant: str, seed: int, data: dict, vectors: torch.Tensor | None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"train": (x (n, 1, 32, 32), y (n,) in {0, 1}), "test": ...} drawn from D(v)."""
    v = direction(study, variant, vectors)
    gen = generator("direction-data", study, variant, seed)
    out = {}
    for split in ("train", "test"):
        y = balanced_labels(data[f"n_{split}"], gen)
        x = sample_dv(v, y, data["eps"], data["sigma"], gen)
        out[split] = (x.reshape(len(y), 1, SIDE, SIDE), ((y + 1) / 2).long())
    return out
