"""Synthetic data D(v) and the underspecified pairs D(v1) (+) D(v2), regenerated from small specs.

D(v): x = eps * y * v + w, w ~ N(0, sigma^2 (I - v v^T)), y in {-1, +1} balanced, |v| = 1.
The data are linearly separable along v only. A dataset spec stores what is needed to draw the
exact tensors again (directions, eps, sigma, sizes, seed) and a checksum of those tensors, so
train and evaluate regenerate and verify them instead of reading tens of GB from disk.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from .io import generator, load_torch, save_torch

SIDE = 32  # images are SIDE x SIDE, directions have SIDE**2 coordinates


class ChecksumError(RuntimeError):
    """Regenerated tensors differ from the ones the spec was written for."""


def balanced_labels(n: int, gen: torch.Generator) -> torch.Tensor:
    """(n,) labels in {-1, +1}: n // 2 of -1, the rest +1, in random order."""
    y = torch.ones(n)
    y[: n // 2] = -1
    return y[torch.randperm(n, generator=gen)]


def sample_dv(
    v: torch.Tensor, y: torch.Tensor, eps: float, sigma: float, gen: torch.Generator
) -> torch.Tensor:
    """(n, d) samples of D(v) for labels `y` (n,): eps * y * v plus noise orthogonal to v."""
    v = v.double() / v.double().norm()
    g = torch.randn(len(y), v.numel(), generator=gen, dtype=torch.float64) * sigma
    w = g - (g @ v)[:, None] * v[None, :]  # project out v: covariance sigma^2 (I - v v^T)
    return (eps * y.double()[:, None] * v[None, :] + w).float()


@dataclass(frozen=True)
class PairSpec:
    """Everything that determines one cell's train and test tensors of D(v1) (+) D(v2)."""

    v1: torch.Tensor  # (1024,) float32, unit norm
    v2: torch.Tensor  # (1024,) float32, unit norm
    eps1: float
    eps2: float
    sigma: float
    n_train: int
    n_test: int
    seed: int  # the data seed, derived from the cell's key

    def generate(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """{"train": (x, y), "test": (x, y)}: x (n, 2, 32, 32) float32, y (n,) int64 in {0, 1}.

        Drawn on the CPU in float64 from one seeded generator, so the bytes are the same on
        every machine and device.
        """
        gen = generator("pair-data", self.seed)
        out = {}
        for split, n in (("train", self.n_train), ("test", self.n_test)):
            y = balanced_labels(n, gen)
            x1 = sample_dv(self.v1, y, self.eps1, self.sigma, gen)
            x2 = sample_dv(self.v2, y, self.eps2, self.sigma, gen)
            x = torch.stack([x1, x2], dim=1).reshape(n, 2, SIDE, SIDE)
            out[split] = (x, ((y + 1) / 2).long())
        return out

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def checksum(tensors: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> str:
    """sha256 over the splits' tensors in a fixed order."""
    h = hashlib.sha256()
    for split in sorted(tensors):
        for t in tensors[split]:
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def write_pair_spec(spec: PairSpec, path: str, meta: dict) -> str:
    """Generate the cell's tensors once, store the spec with their checksum; return it."""
    digest = checksum(spec.generate())
    save_torch({"spec": spec.to_dict(), "sha256": digest, "meta": meta}, path)
    return digest


def load_pair_data(path: str) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict]:
    """Regenerate the tensors of a spec file and verify them against its checksum."""
    stored = load_torch(path)
    spec = PairSpec(**stored["spec"])
    tensors = spec.generate()
    if checksum(tensors) != stored["sha256"]:
        raise ChecksumError(
            f"{path}: regenerated data do not match the stored checksum (different torch "
            f"version or a corrupt file?); delete it and rerun snakemake to rebuild it"
        )
    return tensors, stored
