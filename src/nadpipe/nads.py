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

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm import tqdm

from .data import SIDE
from .dipole import WindowedDipole
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
    networks_per_chunk: int = 64  # random networks drawn together (memory bound)
    windowed: bool = True  # dipole: carry each probe's change as a window (nadpipe.dipole)

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


def central_difference(f: torch.Tensor, step: float) -> torch.Tensor:
    """(..., 1024) (f(x0 + h e_k) - f(x0 - h e_k)) / 2h in float64 from f (..., 2048) of the
    probes x0 + h e_k, then x0 - h e_k."""
    return (f[..., :D].double() - f[..., D:].double()) / (2 * step)


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
        rows.append(central_difference(f, step))
    return torch.stack(rows).cpu()


def gradient_sensitivity(net: nn.Module, x0: torch.Tensor) -> torch.Tensor:
    """(n_points, 1024) exact input gradients of the single logit at each x0."""
    device = next(net.parameters()).device
    x = x0.to(device).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(net(x)[:, 0].sum(), x)  # eval mode: points independent
    return grad.reshape(len(x0), D).double().cpu()


# -- many random networks at once ------------------------------------------------------------

UNIFORM_INIT = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
AFFINE_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)


def init_bound(module: nn.Module) -> float:
    """PyTorch's default init of Linear and ConvNd: weight by kaiming_uniform_(a=sqrt(5)) and
    bias by uniform_, both U(-b, b) with b = 1 / sqrt(fan_in)."""
    return 1 / math.sqrt(module.weight[0].numel())


def stacked_init(template: nn.Module, seeds: list[int]) -> dict[str, torch.Tensor] | None:
    """Parameters of one network per seed, shaped like `template`, as stacked tensors
    (len(seeds), *shape), drawn from PyTorch's default initialisation of each module: Linear
    and ConvNd U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias, norm layers weight 1
    and bias 0. Network k draws from its own generator, so a network does not depend on how
    the networks are chunked. None when a module with parameters is of another kind (its
    default init is unknown here)."""
    shapes = {}
    for prefix, module in template.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        if isinstance(module, UNIFORM_INIT):
            kind = init_bound(module)
        elif isinstance(module, AFFINE_NORMS) and set(own) <= {"weight", "bias"}:
            kind = "norm"
        else:
            return None
        for k, p in own.items():
            shapes[f"{prefix}.{k}" if prefix else k] = (p.shape, kind, k)
    uniform = [(name, shape, kind) for name, (shape, kind, _) in shapes.items() if kind != "norm"]
    sizes = [math.prod(shape) for _, shape, _ in uniform]
    flat = torch.empty(len(seeds), sum(sizes))
    for i, seed in enumerate(seeds):  # one draw per network, from its own generator
        torch.rand(flat.shape[1], generator=torch.Generator().manual_seed(seed), out=flat[i])
    out = {}
    for (name, shape, bound), part in zip(uniform, flat.split(sizes, dim=1), strict=True):
        out[name] = ((part * 2 - 1) * bound).reshape(len(seeds), *shape)
    for name, (shape, kind, k) in shapes.items():
        if kind == "norm":
            out[name] = torch.full((len(seeds), *shape), 1.0 if k == "weight" else 0.0)
    return {name: out[name] for name in shapes}


def uses_default_init(build: Callable[[], nn.Module], gen_seed: int, n: int = 4) -> bool:
    """Whether real networks from `build` look default-initialised: every Linear/ConvNd
    parameter inside +-1/sqrt(fan_in) with the uniform's std (within 30 %, for tensors of 200+
    entries), norm layers at weight 1, bias 0. Catches a builder with its own init."""
    torch.manual_seed(gen_seed)
    for _ in range(n):
        net = build()
        for module in net.modules():
            own = dict(module.named_parameters(recurse=False))
            if isinstance(module, UNIFORM_INIT):
                b = init_bound(module)
                for p in own.values():
                    if p.abs().max() > b * (1 + 1e-6):
                        return False
                    if p.numel() >= 200 and abs(p.std().item() / (b / math.sqrt(3)) - 1) > 0.3:
                        return False
            elif isinstance(module, AFFINE_NORMS):
                if "weight" in own and not torch.all(own["weight"] == 1):
                    return False
                if "bias" in own and not torch.all(own["bias"] == 0):
                    return False
    return True


def batched_sensitivities(
    template: nn.Module,
    params: dict[str, torch.Tensor],
    x0: torch.Tensor,
    estimator: str,
    step: float,
    batch_size: int,
    plan: WindowedDipole | None = None,
    done: Callable[[int], object] = lambda n: None,
) -> torch.Tensor:
    """(n, n_points, 1024) sensitivities of n networks given as stacked `params` (buffers
    shared from `template`, which is in eval mode): with a dipole `plan`, one network after
    another, each probe carried as a window (`nadpipe.dipole`); otherwise all at once
    (torch.func: vmap over networks of functional_call). `done(k)` is told as k more networks
    are done."""
    if estimator == "dipole" and plan is not None:
        return _windowed_dipole(plan, params, x0, step, batch_size, done)
    buffers = dict(template.named_buffers())

    def logit(p: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(template, (p, buffers), (x,))[:, 0]

    if estimator == "gradient":
        # eval mode: points are independent, so the gradient of the sum is per-point
        g = vmap(grad(lambda p, x: logit(p, x).sum(), argnums=1), in_dims=(0, None))(params, x0)
        done(g.shape[0])
        return g.reshape(g.shape[0], len(x0), D).double()
    eye = torch.eye(D, device=x0.device).reshape(D, 1, SIDE, SIDE) * step
    n = next(iter(params.values())).shape[0]
    per_call = max(1, batch_size // n)  # forward passes per call: networks x probes
    rows = []
    with torch.inference_mode():
        for p in x0:
            probes = torch.cat([p + eye, p - eye])  # (2048, 1, 32, 32)
            f = torch.cat(
                [vmap(logit, in_dims=(0, None))(params, c) for c in probes.split(per_call)],
                dim=1,
            )  # (n, 2048)
            rows.append(central_difference(f, step))
    done(n)
    return torch.stack(rows, dim=1)


def dipole_probes(step: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixels (2048, 2) (row, col) and changes (2048,): x0 + h e_k for every k, then x0 - h e_k
    (k = row * 32 + col)."""
    grid = torch.stack(torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij"))
    pixels = grid.reshape(2, D).T.repeat(2, 1)
    deltas = torch.cat([torch.full((D,), step), torch.full((D,), -step)])
    return pixels.to(device), deltas.to(device)


def dipole_plan(template: nn.Module, settings: NadSettings, device) -> WindowedDipole | None:
    """The windowed plan of the dipole probes through `template`, None when not windowed."""
    if settings.estimator != "dipole" or not settings.windowed:
        return None
    pixels, _ = dipole_probes(settings.step)
    return WindowedDipole.plan(template, pixels, (SIDE, SIDE), device)


@torch.inference_mode()
def _windowed_dipole(
    plan: WindowedDipole,
    params: dict,
    x0: torch.Tensor,
    step: float,
    batch_size: int,
    done: Callable[[int], object],
) -> torch.Tensor:
    """(n, n_points, 1024) dipole sensitivities, one network after another (each one's 2 048
    probes in chunks of `batch_size`)."""
    _, deltas = dipole_probes(step, x0.device)
    n = next(iter(params.values())).shape[0]
    out = torch.empty(n, len(x0), D, dtype=torch.float64)
    for i in range(n):
        own = {k: v[i] for k, v in params.items()}
        for j, p in enumerate(x0):
            f = torch.cat(
                [
                    plan(own, p, deltas, slice(a, a + batch_size))
                    for a in range(0, 2 * D, batch_size)
                ]
            )  # (2048,)
            out[i, j] = central_difference(f, step).cpu()
        done(1)
    return out


def sample_sensitivities(
    build: Callable[[], nn.Module],
    settings: NadSettings,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> torch.Tensor:
    """(n_networks * n_points, 1024) float64 input sensitivities of random networks.

    Networks are drawn in chunks of stacked parameters and evaluated together (torch.func)
    when every parametrised module has a known default init (`stacked_init`) and the builder
    does not override it (`uses_default_init`); otherwise one real module after another.
    """
    x0 = eval_points(settings)
    out = torch.empty(settings.n_networks * settings.n_points, D, dtype=torch.float64)
    template = build().eval().to(device)
    chunk = settings.networks_per_chunk
    if stacked_init(template, [0]) is not None and uses_default_init(
        build, derive_seed("nad-init-check", settings.seed)
    ):
        plan = dipole_plan(template, settings, device)
        if plan is not None and progress:
            ops = plan.windowed
            print(
                f"NADs: dipole probes as windows through {len(ops)} operations "
                f"({ops[0]} to {ops[-1]})"
            )
        bar = tqdm(total=settings.n_networks, desc="NADs", disable=not progress, mininterval=5)
        for start in range(0, settings.n_networks, chunk):
            n = min(chunk, settings.n_networks - start)
            seeds = [derive_seed("nad-net", settings.seed, k) for k in range(start, start + n)]
            params = {k: v.to(device) for k, v in stacked_init(template, seeds).items()}
            s = batched_sensitivities(
                template, params, x0.to(device), settings.estimator, settings.step,
                settings.batch_size, plan, bar.update,
            )  # fmt: skip
            out[start * settings.n_points : (start + n) * settings.n_points] = s.reshape(
                -1, D
            ).cpu()
        bar.close()
        return out
    print("NADs: a module's default init is unknown or overridden: one network at a time")
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
