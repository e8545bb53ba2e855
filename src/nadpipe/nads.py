"""Neural anisotropy directions: eigenvectors of the covariance, over random initialisations,
of a single-logit network's input sensitivity at a fixed random point x0, by decreasing
eigenvalue (NAD 0 = the direction the architecture picks up most easily).

Two estimators of the sensitivity:
- "dipole" (default, the NAD paper's): per input coordinate k the central difference
  (f(x0 + h e_k) - f(x0 - h e_k)) / 2h with a large step h (default 100), the response to a
  "discriminative dipole", nearly independent of x0. The published NADs rest on it.
- "gradient": the input gradient at x0 by autograd: the dipole's step-0 limit, another object
  than the published NADs (told once per process, `_warn_unpublished`).
What each estimates, and which settings only it reads: nadpipe.estimators.

Network k is a real module built under its own seed, exactly as PyTorch initialises it (a custom
initialisation included), whichever path evaluates it. The covariance is centred over networks
(as the reference's PCA is) and computed in float64.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from functools import partial

import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from .backend import accelerated, born_on, cuda_rng_state, set_cuda_rng_state
from .convergence import verdict
from .data import Shape
from .dipole import WindowedDipole
from .estimators import ESTIMATORS
from .grouped import Grouped, NotGroupable
from .io import ArtifactError, derive_seed, generator, load_claimed, save_claimed
from .log import debug, progress_bar, say, warn
from .models import call_builder, takes_arguments
from .settings import MAX_FULL_D, NadSettings

KS = (1, 10, 50, 100)  # the split-half overlaps reported


class NadError(RuntimeError):
    """The NADs cannot be computed as asked; the message says why and what to change."""


def eval_points(settings: NadSettings, shape: Shape) -> torch.Tensor:
    """(n_points, C, H, W) fixed random points x0 ~ N(0, I)."""
    gen = generator("nad-x0", settings.seed)
    return torch.randn(settings.n_points, *shape, generator=gen, device=gen.device)


def draw_networks(
    build: Callable[[], nn.Module], settings: NadSettings, ks: range, device="cpu"
) -> list[nn.Module]:
    """Networks k in `ks`, each built by `build` under its own seed (so no network depends on
    how they are chunked), in eval mode, born on `device`: made and initialised there, no tensor
    copied across (a tensor the builder puts elsewhere on purpose is moved). The same seed
    gives the same networks on devices of the same type; a GPU's generator draws other numbers
    than the CPU's, so other networks of the same distribution. Torch's global generators are
    left as they were."""
    device = torch.device(device)
    cpu_state, cuda_state = torch.get_rng_state(), cuda_rng_state()
    try:
        nets = []
        # on the CPU they are born there anyway: no device context (a function mode: 2-15 % of
        # a construction, measured by benchmarks/nad_networks.py)
        with born_on(device) if accelerated(device) else contextlib.nullcontext():
            for k in ks:
                torch.manual_seed(derive_seed("nad-net", settings.seed, k))
                nets.append(build().eval().to(device))
        return nets
    finally:
        torch.set_rng_state(cpu_state)
        set_cuda_rng_state(cuda_state)


def central_difference(f: torch.Tensor, step: float) -> torch.Tensor:
    """(..., d) (f(x0 + h e_k) - f(x0 - h e_k)) / 2h in float64 from f (..., 2d) of the probes
    x0 + h e_k, then x0 - h e_k."""
    d = f.shape[-1] // 2
    return (f[..., :d].double() - f[..., d:].double()) / (2 * step)


def dipole_probes(step: float, shape: Shape, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates (2d, 3) (channel, row, col) and changes (2d,) on `device`: x0 + h e_k for
    every k, then x0 - h e_k (k = (channel * H + row) * W + col, the flattened order)."""
    grids = torch.meshgrid(*(torch.arange(n, device=device) for n in shape), indexing="ij")
    coords = torch.stack(grids).reshape(3, shape.d).T.repeat(2, 1)
    deltas = torch.full((2, shape.d), step, device=device)
    deltas[1] = -step
    return coords, deltas.flatten()


def probes(x0: torch.Tensor, step: float, start: int, stop: int) -> torch.Tensor:
    """Probes start..stop-1 of the 2d probes x0 + h e_k (k < d), then x0 - h e_k, as a
    (stop - start, C, H, W) batch (built a chunk at a time: no d x d identity)."""
    d = x0.numel()
    k = torch.arange(start, stop, device=x0.device)
    out = x0.expand(len(k), *x0.shape).clone()
    flat = out.view(len(k), d)
    flat[torch.arange(len(k), device=x0.device), k % d] += torch.where(k < d, step, -step).to(
        out.dtype
    )
    return out


@torch.inference_mode()
def dipole_sensitivity(
    net: nn.Module, x0: torch.Tensor, step: float, batch_size: int
) -> torch.Tensor:
    """(n_points, d) central differences of the single logit at each x0 along every e_k,
    every probe through the whole network, `batch_size` probes at a time; on the network's
    device."""
    device = next(net.parameters()).device
    rows = []
    for p in x0.to(device):
        n = 2 * p.numel()
        f = torch.cat(
            [net(probes(p, step, a, min(a + batch_size, n)))[:, 0] for a in range(0, n, batch_size)]
        )
        rows.append(central_difference(f, step))
    return torch.stack(rows)


def gradient_sensitivity(net: nn.Module, x0: torch.Tensor) -> torch.Tensor:
    """(n_points, d) input gradients of the single logit at each x0 (autograd)."""
    device = next(net.parameters()).device
    x = x0.to(device).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(net(x)[:, 0].sum(), x)  # eval mode: points independent
    return g.reshape(len(x0), -1).double().cpu()


def dipole_plan(template: nn.Module, settings: NadSettings, shape: Shape, device):
    """The windowed plan of the dipole probes through `template`, None when not windowed."""
    if settings.estimator != "dipole" or not settings.windowed:
        return None
    coords, _ = dipole_probes(settings.step, shape, "cpu")  # planned on the CPU, then moved
    return WindowedDipole.plan(template, coords, shape.size, device)


def computation(name: str) -> Callable:
    """The computation of the estimator `name` (COMPUTATIONS). An unknown name, or an entry of
    nadpipe.estimators without its computation, fails here, naming it: no estimator falls
    through to another's computation."""
    if name not in ESTIMATORS:
        known = ", ".join(ESTIMATORS)
        raise NadError(f"unknown NAD estimator {name!r}; the registered ones: {known}")
    if name not in COMPUTATIONS:
        raise NadError(
            f"NAD estimator {name!r} (nadpipe.estimators) has no computation in "
            f"nadpipe.nads.COMPUTATIONS"
        )
    return COMPUTATIONS[name]


def batched_sensitivities(
    nets: list[nn.Module],
    x0: torch.Tensor,
    estimator: str,
    step: float,
    batch_size: int,
    plan: WindowedDipole | None = None,
    done: Callable[[int], object] = lambda n: None,
    together: bool = False,
) -> torch.Tensor:
    """(n, n_points, d) sensitivities of the networks `nets` (one structure, eval mode) by the
    estimator's computation (`computation`), the dipole's networks `together` in one call per
    chunk of probes (vmap over their stacked parameters) or, by default, one after another.
    One after another is the faster on every device measured (docs/speed.md): on an NVIDIA
    H100 a chunk of 64 LeNets in one call took 1.6 times as long per network, 16 ResNet-18s
    1.7 times; on the CPU the per-network calls are as fast. The two agree up to float
    rounding (tests/test_nads.py). `done(k)` is told as k more networks are done."""
    return computation(estimator)(nets, x0, step, batch_size, plan, done, together)


def _stacked(nets: list[nn.Module]):
    params, buffers = stack_module_state(nets)  # name -> (n, ...)
    params = {k: v.detach() for k, v in params.items()}  # no graph through the parameters
    return copy.deepcopy(nets[0]).to("meta"), params, buffers


def by_dipole(nets, x0, step, batch_size, plan, done, together) -> torch.Tensor:
    """The dipole (ESTIMATORS["dipole"]): `together` "grouped": the networks as one grouped
    network (nadpipe.grouped), `batch_size` probes a call for all of them, where their structure
    allows (else as below); each probe carried as a window with a `plan` (nadpipe.dipole), else
    through the whole network; the networks together in one vmapped call per chunk of probes,
    or each network's 2d probes through its own forward, batch_size at a time."""
    if together == "grouped":
        try:
            grouped = Grouped(nets)
        except NotGroupable:
            together = False
        else:
            out = _grouped_dipole(grouped, nets[0], x0, step, batch_size)
            done(len(nets))
            return out
    if plan is not None and not together:
        return _windowed_dipole(plan, nets, x0, step, batch_size, done)
    if together:
        out = _dipole_together(*_stacked(nets), x0, step, batch_size, plan)
        done(len(nets))
        return out
    out = torch.stack([dipole_sensitivity(net, x0, step, batch_size) for net in nets])
    done(len(nets))
    return out


# the largest value of a grouped call, in elements: on a CPU what stays near its caches (LeNet,
# 8 networks: 103 CPU-ms a network at 2**22, 176 at 2**24, 2 cores of an AMD EPYC), on an
# accelerator 256 MB of float32
GROUPED_ELEMENTS = {"cpu": 2**22}
GROUPED_ELEMENTS_ELSEWHERE = 2**26


def _grouped_dipole(grouped, template, x0, step, batch_size) -> torch.Tensor:
    """(n, n_points, d) dipole sensitivities of the grouped networks: `batch_size` probes a
    call for every network at once, fewer where the largest value of a call would pass the
    device's bound (GROUPED_ELEMENTS): the calls no longer grow with the networks, up to it."""
    n, d = grouped.n, x0[0].numel()
    per_probe = n * grouped.largest(template, x0[:1])
    bound = GROUPED_ELEMENTS.get(x0.device.type, GROUPED_ELEMENTS_ELSEWHERE)
    per_call = max(1, min(batch_size, bound // per_probe))
    out = torch.empty(n, len(x0), d, dtype=torch.float64, device=x0.device)
    for j, p in enumerate(x0):
        f = torch.cat(
            [grouped(probes(p, step, a, min(a + per_call, 2 * d)))[:, :, 0]
             for a in range(0, 2 * d, per_call)]
        )  # fmt: skip
        out[:, j] = central_difference(f.T, step)
    return out


def by_gradient(nets, x0, step, batch_size, plan, done, together) -> torch.Tensor:
    """The input gradient at x0 (ESTIMATORS["gradient"]) of all networks at once (torch.func:
    vmap over the stacked modules); eval mode: points are independent, so the gradient of the
    sum is per point."""
    base, params, buffers = _stacked(nets)

    def logit(p: dict, b: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))[:, 0]

    per_net = vmap(grad(lambda p, b, x: logit(p, b, x).sum(), argnums=2), in_dims=(0, 0, None))
    with warnings.catch_warnings():  # attention under vmap: exact, by a slower fallback
        warnings.filterwarnings("ignore", "There is a performance drop", UserWarning)
        g = per_net(params, buffers, x0)
    done(len(nets))
    return g.reshape(len(nets), len(x0), x0[0].numel()).double()


class _Planned(nn.Module):
    """A network whose forward is a windowed plan's evaluation, so that torch.func can call it
    with each network's parameters (vmap over the stacked networks)."""

    def __init__(self, net: nn.Module, plan: WindowedDipole):
        super().__init__()
        self.net = net
        self.plan = [plan]  # in a list: not a submodule

    def forward(self, x0, deltas, start: int, stop: int) -> torch.Tensor:
        return self.plan[0](self.net, x0, deltas, slice(start, stop))


# each estimator's computation (nadpipe.estimators names and describes them)
COMPUTATIONS: dict[str, Callable] = {"dipole": by_dipole, "gradient": by_gradient}


@torch.inference_mode()
def _dipole_together(base, params, buffers, x0, step, batch_size, plan) -> torch.Tensor:
    """(n, n_points, d) dipole sensitivities of the stacked networks, all of them in each call:
    `batch_size` forward passes per call, shared among the networks (probes as windows when a
    `plan` is given)."""
    n = len(next(iter(params.values())))
    per_call = max(1, batch_size // n)  # probes per call, for every network at once
    _, deltas = dipole_probes(step, Shape(*x0.shape[1:]), x0.device)
    if plan is not None:
        planned = _Planned(base, plan)
        pre = (
            {f"net.{k}": v for k, v in params.items()},
            {f"net.{k}": v for k, v in buffers.items()},
        )

        def logits(p, b, x, a, z):
            return functional_call(planned, (p, b), (x, deltas, a, z))

        call = vmap(logits, in_dims=(0, 0, None, None, None))

        def chunk(point, a, z):  # (n, z - a) logits of probes a..z of every network
            return call(*pre, point, a, z)
    else:
        call = vmap(lambda p, b, x: functional_call(base, (p, b), (x,))[:, 0], in_dims=(0, 0, None))

        def chunk(point, a, z):
            return call(params, buffers, probes(point, step, a, z))

    total = len(deltas)
    rows = []
    for point in x0:
        f = [chunk(point, a, min(a + per_call, total)) for a in range(0, total, per_call)]
        rows.append(central_difference(torch.cat(f, dim=1), step))  # (n, d)
    return torch.stack(rows, dim=1)


@torch.inference_mode()
def _windowed_dipole(plan, nets, x0, step, batch_size, done) -> torch.Tensor:
    """(n, n_points, d) dipole sensitivities, one network after another (each one's 2d probes
    in chunks of `batch_size`), on x0's device: the caller copies a chunk's back at once (a
    copy per network would make the host wait for each one)."""
    _, deltas = dipole_probes(step, Shape(*x0.shape[1:]), x0.device)
    out = torch.empty(len(nets), len(x0), x0[0].numel(), dtype=torch.float64, device=x0.device)
    for i, net in enumerate(nets):
        for j, p in enumerate(x0):
            chunks = range(0, len(deltas), batch_size)
            f = torch.cat([plan(net, p, deltas, slice(a, a + batch_size)) for a in chunks])
            out[i, j] = central_difference(f, step)
        done(1)
    return out


def sample_sensitivities(
    build: Callable[[], nn.Module],
    settings: NadSettings,
    shape: Shape,
    device: torch.device | str = "cpu",
    progress: bool = True,
    together: bool = False,
    born: torch.device | str | None = None,
    first: int = 0,
    kept: str | None = None,
) -> torch.Tensor:
    """(n_networks * n_points, d) float64 input sensitivities of random networks from `build`
    (single logit, inputs of `shape`): networks first .. first + n_networks - 1 (a shard of
    them, nadpipe.shards), `networks_per_chunk` built at a time from `first` on. `born`: the
    device the networks are drawn on (default `device`); "cpu" gives a GPU the CPU's networks,
    moved over (to compare the two devices' NADs of the same networks; slower). `kept`: a
    folder where each chunk's sensitivities are written as it ends, and read back instead of
    computed when there (a stopped job's rerun computes only the rest: network k is drawn under
    its own seed, so the result is the same bit for bit); the caller names it after everything
    that decides the sensitivities and removes it once they are used."""
    x0 = eval_points(settings, shape).to(device)
    # (networks x points, d) on the CPU: the covariance is formed there, in float64
    out = torch.empty(
        settings.n_networks * settings.n_points, shape.d, dtype=torch.float64, device="cpu"
    )
    plan = dipole_plan(build().eval(), settings, shape, device)
    on = settings.grouped is True or (settings.grouped == "auto" and accelerated(device))
    grouped = settings.estimator == "dipole" and on
    if plan is not None and progress:
        ops = plan.windowed
        say(f"NADs: dipole probes as windows through {len(ops)} operations ({ops[0]} to {ops[-1]})")
    bar = progress_bar(settings.n_networks, "NADs", unit="net", enabled=progress)
    chunk = settings.networks_per_chunk
    stop = first + settings.n_networks
    for start in range(first, stop, chunk):
        ks = range(start, min(start + chunk, stop))
        rows = slice((start - first) * settings.n_points, (ks.stop - first) * settings.n_points)
        done = os.path.join(kept, f"{ks.start}-{ks.stop}.pt") if kept else None
        claim = {"job": os.path.basename(kept or ""), "first": ks.start, "stop": ks.stop}
        found = _kept_chunk(done, claim, out[rows].shape) if done else None
        if found is not None:
            out[rows] = found
            bar.update(len(ks))
            continue
        began = time.perf_counter()
        nets = draw_networks(build, settings, ks, born or device)
        if born is not None:
            nets = [net.to(device) for net in nets]
        built = time.perf_counter()
        s = batched_sensitivities(
            nets,
            x0,
            settings.estimator,
            settings.step,
            settings.batch_size,
            plan,
            bar.update,
            together or ("grouped" if grouped else False),
        )
        out[rows] = s.reshape(-1, shape.d).cpu()
        if done:
            save_claimed(out[rows].clone(), claim, done)
        debug(
            f"NADs: networks {ks.start}-{ks.stop - 1} built in {built - began:.2f} s, "
            f"probed in {time.perf_counter() - built:.2f} s"
        )
    bar.close()
    return out


def _kept_chunk(path: str, claim: dict, shape: torch.Size) -> torch.Tensor | None:
    """A finished chunk's sensitivities kept by a stopped job, if they are what this chunk
    needs: this job's (the folder's key), these networks, this shape, float64, finite. One
    that is not is dropped, said with its path, and computed again: kept files are read back
    only once checked."""
    if not os.path.exists(path):
        return None
    try:
        value = load_claimed(path, claim)
        if not isinstance(value, torch.Tensor):
            raise ArtifactError(f"{path} holds a {type(value).__name__}, not sensitivities")
        if value.shape != shape or value.dtype != torch.float64:
            raise ArtifactError(
                f"{path} holds {value.dtype} of shape {tuple(value.shape)}, not float64 of "
                f"shape {tuple(shape)}"
            )
        if not torch.isfinite(value).all():
            raise ArtifactError(f"{path} holds values that are not finite")
    except ArtifactError as e:
        warn(f"a kept chunk of NAD networks {claim['first']}-{claim['stop'] - 1} was dropped "
             f"and is computed again: {e}")  # fmt: skip
        os.remove(path)
        return None
    return value


def fix_signs(vectors: torch.Tensor) -> torch.Tensor:
    """Flip each row so that its largest-magnitude coordinate (first one on ties) is positive."""
    idx = vectors.abs().argmax(dim=1)
    signs = torch.sign(vectors.gather(1, idx[:, None]))
    return vectors * signs


def nads_from_sensitivities(
    g: torch.Tensor, top_k: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalues (k,), vectors (k, d)) of the centred covariance of `g` (m, d), by decreasing
    eigenvalue; row k of `vectors` is NAD k, unit norm, signs by `fix_signs`.

    All d when `top_k` is None (the d x d covariance, up to MAX_FULL_D coordinates). With
    `top_k`, and fewer samples than coordinates, the first k come from the m x m Gram matrix of
    the centred sensitivities (the same eigenvectors, without forming the d x d matrix); k must
    then be below m, the rank.
    """
    g = g.double()
    m, d = g.shape
    centred = g - g.mean(dim=0, keepdim=True)
    denom = max(m - 1, 1)
    if top_k is None and d > MAX_FULL_D:
        raise NadError(
            f"{d} input coordinates: the {d} x {d} covariance would take "
            f"{d * d * 8 / 1e9:.1f} GB and a slow eigendecomposition; set nads.top_k (e.g. 256) "
            "to compute the first NADs from the sensitivities directly"
        )
    if top_k is None or d <= m:
        evals, evecs = torch.linalg.eigh(centred.T @ centred / denom)  # ascending, columns
        order = torch.argsort(evals, descending=True, stable=True)[: top_k or d]
        return evals[order], fix_signs(evecs[:, order].T.contiguous())
    if top_k > m - 1:
        raise NadError(
            f"nads.top_k = {top_k} NADs asked from {m} sensitivity samples, whose covariance has "
            f"rank at most {m - 1}: lower nads.top_k or raise nads.n_networks above {top_k + 1}"
        )
    evals, u = torch.linalg.eigh(centred @ centred.T / denom)  # (m,), (m, m)
    order = torch.argsort(evals, descending=True, stable=True)[:top_k]
    evals, u = evals[order], u[:, order]
    vectors = (centred.T @ u) / (evals * denom).clamp_min(1e-300).sqrt()  # (d, k) unit columns
    return evals, fix_signs(vectors.T.contiguous())


def subspace_overlap(u: torch.Tensor, v: torch.Tensor, k: int) -> float:
    """||U_k^T V_k||_F^2 / k for the first k rows of `u` and `v` (orthonormal rows): 1 for the
    same subspace, about k / d for random ones."""
    return (u[:k].double() @ v[:k].double().T).pow(2).sum().item() / k


def split_half(g: torch.Tensor, n_points: int, ks: tuple[int, ...] = KS) -> dict:
    """NADs from two halves of the networks: subspace overlaps of their first k NADs, and the
    largest difference of their top eigenvalues relative to the top one.

    From n samples a centred covariance has rank at most n - 1; past it the NADs of a half span
    its null space in arbitrary order, and any overlap there means nothing. An overlap at k is
    reported only where both halves have rank >= k; otherwise it is NaN and `undefined` says why.
    """
    d = g.shape[1]
    per_net = g.reshape(-1, n_points, d)  # (n_networks, n_points, d)
    halves = [per_net[h::2].reshape(-1, d) for h in (0, 1)]
    ranks = [min(max(len(h) - 1, 0), d) for h in halves]
    usable = min(ranks)
    wanted = [k for k in ks if k <= d]
    out = {
        "overlap": {k: float("nan") for k in wanted},
        "undefined": {},
        "eigenvalue_rel_diff_top10": float("nan"),
        "halves": [len(per_net[0::2]), len(per_net[1::2])],
        "ranks": ranks,
    }
    for k in wanted:
        if k > usable:
            out["undefined"][k] = (
                f"each half's covariance has rank {usable} < {k} (halves of "
                f"{out['halves'][0]} and {out['halves'][1]} networks)"
            )
    if usable < 1:
        return out
    k_max = max([k for k in wanted if k <= usable] + [min(10, usable)])
    need = k_max  # the first NADs only: from the Gram matrix when a half is smaller than d
    (ea, va), (eb, vb) = (nads_from_sensitivities(h, need) for h in halves)
    for k in wanted:
        if k <= usable:
            out["overlap"][k] = subspace_overlap(va, vb, k)
    top = min(10, usable)
    scale = (ea[0] + eb[0]) / 2
    if scale > 0:
        out["eigenvalue_rel_diff_top10"] = ((ea[:top] - eb[:top]).abs().max() / scale).item()
    out["curve"] = _curve(per_net, out["overlap"].get(10, float("nan")))
    return out


def _curve(per_net: torch.Tensor, top10: float) -> dict[int, float]:
    """The split-half top-10 overlap of the first n/8, n/4, n/2 networks and of all n: how it
    grows with the networks, from which nadpipe.convergence.forecast reads how many a target
    needs. Only the sizes whose halves have rank 10 or more."""
    n, d = per_net.shape[0], per_net.shape[2]
    curve = {}
    for m in (n // 8, n // 4, n // 2):
        halves = [per_net[:m][h::2].reshape(-1, d) for h in (0, 1)]
        if min(len(h) for h in halves) - 1 < 10 or d < 10:
            continue
        (_, va), (_, vb) = (nads_from_sensitivities(h, 10) for h in halves)
        curve[m] = subspace_overlap(va, vb, 10)
    if math.isfinite(top10):
        curve[n] = top10
    return curve


def compute_nads(
    build: Callable[[], nn.Module],
    settings: NadSettings,
    shape: Shape,
    device: torch.device | str = "cpu",
    progress: bool = True,
    together: bool = False,
    advice: str | None = "raise NadSettings.n_networks (now {n})",
    born: torch.device | str | None = None,
    kept: str | None = None,
) -> dict:
    """The NAD artifact of the networks `build` makes (single logit, inputs of `shape`):
    vectors (k, d) float32 (row k = NAD k), eigenvalues, the split-half diagnostics and the
    settings. Raise NadError when a sensitivity is not finite (the network's output overflows).

    `build`: a callable without arguments that returns the one-logit network, or a builder as
    the workflow's and the command's, called as build(in_channels=C, num_classes=1,
    [input_size=(H, W)]). With `progress`, it logs its phases, the split-half overlaps and the
    convergence verdict (nadpipe.convergence; a warning when not converged), `advice` saying
    what to do about too few networks ({n}: the networks; None: no verdict, as in the workflow,
    whose figure job says it). `born`: where the networks are drawn, `kept`: where finished
    chunks are kept (both: sample_sensitivities)."""
    start = time.perf_counter()
    g = sample_sensitivities(
        as_network(build, shape, settings),
        settings,
        shape,
        device,
        progress,
        together,
        born,
        kept=kept,
    )
    # what a network cost here: how long the networks a forecast asks for would take
    per = (time.perf_counter() - start) / settings.n_networks
    return nads_of(g, settings, shape, device, progress, advice, per)


def as_network(build: Callable, shape: Shape, settings: NadSettings) -> Callable[[], nn.Module]:
    """`build` as a callable without arguments (a builder as the workflow's is called as
    build(in_channels=C, num_classes=1, ...)); says once per process when the estimator does
    not estimate the published NADs."""
    if not ESTIMATORS[settings.estimator].published:
        _warn_unpublished(settings.estimator)
    if takes_arguments(build):  # a builder as the workflow's: (in_channels, num_classes, ...)
        build = partial(call_builder, build, shape, 1, {}, getattr(build, "__name__", "build"))
    return build


def nads_of(
    g: torch.Tensor,
    settings: NadSettings,
    shape: Shape,
    device: torch.device | str = "cpu",
    progress: bool = True,
    advice: str | None = "raise NadSettings.n_networks (now {n})",
    seconds_per_network: float | None = None,
) -> dict:
    """The NAD artifact (compute_nads) of the sensitivities `g` of `settings.n_networks`
    networks (sample_sensitivities, or the shards of nadpipe.shards put together);
    `seconds_per_network`, what one took to compute, for the forecast of more it says
    (nadpipe.convergence.forecast_said)."""
    bad = (~torch.isfinite(g)).any(dim=1).reshape(settings.n_networks, -1).any(dim=1)
    if bad.any():
        first = int(bad.nonzero()[0])
        raise NadError(
            f"the input sensitivities of {int(bad.sum())} of {settings.n_networks} random "
            f"networks are not finite (first: network {first}): the model's output overflows "
            f"or is NaN at x0 +- h e_k (estimator {settings.estimator}, h = {settings.step}); "
            "NADs from them would be meaningless"
        )
    d = shape.d
    if progress:
        how = f"{d} x {d} covariance" if settings.top_k is None or d <= len(g) else "Gram matrix"
        say(f"NADs: eigendecomposition of the {how} of {len(g)} sensitivities")
    evals, vecs = nads_from_sensitivities(g, settings.top_k)
    if not torch.isfinite(evals).all():
        raise NadError("the NAD eigenvalues are not finite; the sensitivities are degenerate")
    if progress:
        say("NADs: split-half diagnostic (the NADs of each half of the networks)")
    art = {
        "vectors": vecs.float(),
        "eigenvalues": evals,
        "shape": list(shape),
        "split_half": split_half(g, settings.n_points),
        "isotropy": isotropy(g, evals[0].item()),
        "settings": asdict(settings),
        "device": torch.device(device).type,
    }
    if progress and advice is not None:
        sh = art["split_half"]
        say(f"NADs: split-half subspace overlaps of the first k NADs: {overlaps_line(sh)}")
        for k, why in sh["undefined"].items():
            say(f"NADs: split-half overlap at k = {k} undefined: {why}")
        # the time of the forecast, said, not kept: an artifact is the same bytes on any run
        timed = {**art, "seconds_per_network": seconds_per_network}
        kind, text = verdict(timed, 0.5, advice.format(n=settings.n_networks))
        (warn if kind in ("not converged", "unknown") else say)(f"NADs: {text}")
    return art


_UNPUBLISHED_TOLD: list[str] = []


def _warn_unpublished(name: str) -> None:
    """Say once per process that an estimator does not estimate the published NADs."""
    if name not in _UNPUBLISHED_TOLD:
        _UNPUBLISHED_TOLD.append(name)
        warn(
            f"NADs with the {name} estimator: {ESTIMATORS[name].about}. The published NADs rest "
            "on the step-100 dipole (the default): compare these with them only knowing that"
        )


def isotropy(g: torch.Tensor, top: float) -> dict:
    """How far the covariance of the sensitivities `g` (m, d) is from isotropic: its top
    eigenvalue `top` over the mean eigenvalue, against the largest eigenvalue an isotropic
    covariance estimated from as many samples shows (the Marchenko-Pastur edge
    (1 + sqrt(d / (m - 1)))^2); their ratio, the anisotropy, is about 1 for an isotropic one.
    Measured (README): an MLP's 1.1-1.3, LeNet's 1.7 from 24 networks to 8.7 from 1 100."""
    m, d = g.shape
    centred = g - g.mean(dim=0, keepdim=True)
    mean = centred.pow(2).sum().item() / max(m - 1, 1) / d  # trace / d
    edge = (1 + math.sqrt(d / max(m - 1, 1))) ** 2
    ratio = top / mean if mean > 0 else float("nan")
    return {
        "top_over_mean": ratio,
        "isotropic_edge": edge,
        "anisotropy": ratio / edge,
        "samples": m,
        "d": d,
    }


def rank(settings: NadSettings, shape: Shape) -> int:
    """The rank of the covariance estimate: at most n_networks * n_points - 1, and d."""
    return min(settings.n_networks * settings.n_points - 1, shape.d)


def overlaps_line(sh: dict) -> str:
    """The split-half overlaps as one line, "k=1: 0.80, k=10: nan (reason)..."."""
    parts = []
    for k, v in sh["overlap"].items():
        parts.append(f"k={k}: {v:.2f}" if math.isfinite(v) else f"k={k}: n/a")
    return ", ".join(parts)
