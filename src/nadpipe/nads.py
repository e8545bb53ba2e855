"""Neural anisotropy directions: eigenvectors of the covariance, over random initialisations,
of a single-logit network's input sensitivity at a fixed random point x0 (1 x 32 x 32).

Two estimators of the sensitivity:
- "dipole" (default, the NAD paper's): per input coordinate k the central difference
  (f(x0 + h e_k) - f(x0 - h e_k)) / 2h with a large step h (default 100), the response to a
  "discriminative dipole", nearly independent of x0. The published NADs rest on it.
- "gradient": the exact input gradient at x0 by autograd.
The covariance is centred over networks (as the reference's PCA is), accumulated in float64.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn
from tqdm import tqdm

from .data import SIDE
from .io import derive_seed, generator

D = SIDE * SIDE
ESTIMATORS = ("dipole", "gradient")


@dataclass(frozen=True)
class NadSettings:
    estimator: str = "dipole"  # "dipole" (central difference with step h) or "gradient"
    step: float = 100.0  # h of the dipole estimator; unused by "gradient"
    n_networks: int = 256  # random initialisations
    n_points: int = 1  # evaluation points x0 ~ N(0, I); covariance pooled over them
    seed: int = 0  # seeds x0 and every network's initialisation
    batch_size: int = 1024  # forward passes per chunk of the dipole estimator (memory bound)

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")


def eval_points(settings: NadSettings) -> torch.Tensor:
    """(n_points, 1, 32, 32) fixed random points x0 ~ N(0, I)."""
    return torch.randn(
        settings.n_points, 1, SIDE, SIDE, generator=generator("nad-x0", settings.seed)
    )


def init_network(build: Callable[[], nn.Module], settings: NadSettings, k: int) -> nn.Module:
    """Network k, initialised by PyTorch's default initialisation under its own seed; eval mode."""
    torch.manual_seed(derive_seed("nad-net", settings.seed, k))
    return build().eval()


@torch.inference_mode()
def dipole_sensitivity(
    net: nn.Module, x0: torch.Tensor, step: float, batch_size: int
) -> torch.Tensor:
    """(n_points, 1024) central differences of the single logit at each x0 along every e_k."""
    device = next(net.parameters()).device
    eye = torch.eye(D, device=device).reshape(D, 1, SIDE, SIDE) * step
    rows = []
    for p in x0.to(device):
        probes = torch.cat([p + eye, p - eye])  # (2048, 1, 32, 32): x0 + h e_k, then x0 - h e_k
        f = torch.cat([net(chunk)[:, 0] for chunk in probes.split(batch_size)])
        rows.append((f[:D].double() - f[D:].double()) / (2 * step))
    return torch.stack(rows).cpu()


def gradient_sensitivity(net: nn.Module, x0: torch.Tensor) -> torch.Tensor:
    """(n_points, 1024) exact input gradients of the single logit at each x0."""
    device = next(net.parameters()).device
    x = x0.to(device).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(net(x)[:, 0].sum(), x)  # eval mode: points independent
    return grad.reshape(len(x0), D).double().cpu()


def sample_sensitivities(
    build: Callable[[], nn.Module],
    settings: NadSettings,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> torch.Tensor:
    """(n_networks * n_points, 1024) float64 input sensitivities of random networks."""
    x0 = eval_points(settings)
    out = torch.empty(settings.n_networks * settings.n_points, D, dtype=torch.float64)
    for k in tqdm(range(settings.n_networks), desc="NADs", disable=not progress, mininterval=5):
        net = init_network(build, settings, k).to(device)
        if settings.estimator == "dipole":
            s = dipole_sensitivity(net, x0, settings.step, settings.batch_size)
        else:
            s = gradient_sensitivity(net, x0)
        out[k * settings.n_points : (k + 1) * settings.n_points] = s
    return out


def fix_signs(vectors: torch.Tensor) -> torch.Tensor:
    """Flip each row so that its largest-magnitude coordinate (first one on ties) is positive."""
    idx = vectors.abs().argmax(dim=1)
    signs = torch.sign(vectors.gather(1, idx[:, None]))
    return vectors * signs


def nads_from_sensitivities(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalues (d,), vectors (d, d)) of the centred covariance of `g` (m, d).

    Sorted by decreasing eigenvalue; row k of `vectors` is NAD k, unit norm, signs by
    `fix_signs`.
    """
    g = g.double()
    centred = g - g.mean(dim=0, keepdim=True)
    cov = centred.T @ centred / max(len(g) - 1, 1)
    evals, evecs = torch.linalg.eigh(cov)  # ascending, eigenvectors as columns
    order = torch.argsort(evals, descending=True, stable=True)
    return evals[order], fix_signs(evecs[:, order].T.contiguous())


def subspace_overlap(u: torch.Tensor, v: torch.Tensor, k: int) -> float:
    """||U_k^T V_k||_F^2 / k for the first k rows of `u` and `v` (orthonormal rows): 1 for the
    same subspace, about k / d for random ones."""
    return (u[:k].double() @ v[:k].double().T).pow(2).sum().item() / k


def split_half(g: torch.Tensor, n_points: int, ks: tuple[int, ...] = (1, 10, 50, 100)) -> dict:
    """NADs from two halves of the networks: subspace overlaps of their first k NADs, and the
    largest difference of their first 10 eigenvalues relative to the top one (near-zero
    eigenvalues make ratios of their own meaningless)."""
    per_net = g.reshape(-1, n_points, g.shape[1])  # (n_networks, n_points, d)
    halves = [per_net[h::2].reshape(-1, g.shape[1]) for h in (0, 1)]
    (ea, va), (eb, vb) = (nads_from_sensitivities(h) for h in halves)
    rel = ((ea[:10] - eb[:10]).abs().max() / ((ea[0] + eb[0]) / 2)).item()
    return {
        "overlap": {k: subspace_overlap(va, vb, k) for k in ks if k <= g.shape[1]},
        "eigenvalue_rel_diff_top10": rel,
        "halves": [len(per_net[0::2]), len(per_net[1::2])],
    }


def compute_nads(
    build: Callable[[], nn.Module],
    settings: NadSettings,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> dict:
    """The NAD artifact: vectors (1024, 1024) float32 (row k = NAD k), eigenvalues, settings."""
    start = time.perf_counter()
    g = sample_sensitivities(build, settings, device, progress)
    evals, vecs = nads_from_sensitivities(g)
    return {
        "vectors": vecs.float(),
        "eigenvalues": evals,
        "split_half": split_half(g, settings.n_points),
        "settings": asdict(settings),
        "seconds": time.perf_counter() - start,
        "device": str(device),
        "torch": str(torch.__version__),
    }
