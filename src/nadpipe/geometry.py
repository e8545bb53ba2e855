"""Geometry and complexity of a trained two-class predictor f (logit difference):
decision-boundary cross-sections, channel reliance, margins along directions, the Jacobian norm
of the softmax (Novak et al., 2018) and ReLU activation-pattern transitions along closed
trajectories.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


def logit_difference(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n,) f(x) = logit of class 1 minus logit of class 0; f > 0 predicts class 1."""
    out = net(x)
    return out[:, 1] - out[:, 0]


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm()


def project_out(x: torch.Tensor, *dirs: torch.Tensor) -> torch.Tensor:
    """`x` (n, ...) with its components along orthonormal `dirs` (each shaped like x[0]) removed."""
    for d in dirs:
        x = x - (x.flatten(1) @ d.flatten())[:, None].reshape(-1, *[1] * d.dim()) * d
    return x


@torch.no_grad()
def cross_section(
    net: nn.Module,
    x: torch.Tensor,
    u1: torch.Tensor,
    u2: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    batch_size: int = 4096,
) -> torch.Tensor:
    """(n, len(b), len(a)) f on the plane through each point of `x` spanned by unit u1, u2.

    The plane's origin is the point with its u1, u2 components removed, so (a, b) are absolute
    coordinates along u1 and u2: rows follow b (u2), columns follow a (u1).
    """
    net.eval()
    base = project_out(x, u1, u2)  # (n, c, h, w)
    bb, aa = torch.meshgrid(b, a, indexing="ij")  # (len(b), len(a))
    offsets = aa.reshape(-1, 1, 1, 1) * u1 + bb.reshape(-1, 1, 1, 1) * u2  # (R*R, c, h, w)
    out = []
    for p in base:
        grid = p[None] + offsets
        f = torch.cat([logit_difference(net, chunk) for chunk in grid.split(batch_size)])
        out.append(f.reshape(len(b), len(a)))
    return torch.stack(out)


def input_gradients(net: nn.Module, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """(n, ...) gradients of f with respect to each input (eval mode: points are independent)."""
    net.eval()
    grads = []
    for chunk in x.split(batch_size):
        chunk = chunk.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(logit_difference(net, chunk).sum(), chunk)
        grads.append(g)
    return torch.cat(grads)


def channel_reliance(
    net: nn.Module, x: torch.Tensor, u1: torch.Tensor, u2: torch.Tensor
) -> dict[str, float]:
    """Mean over `x` of atan2(|df/db|, |df/da|) in degrees, with a along u1 and b along u2.

    0 degrees: f changes only along u1 (channel 1's direction); 90: only along u2.
    """
    g = input_gradients(net, x).flatten(1)
    da = (g @ u1.flatten()).abs()
    db = (g @ u2.flatten()).abs()
    angle = torch.rad2deg(torch.atan2(db, da))
    return {
        "reliance_deg": angle.mean().item(),
        "grad_along_v1": da.mean().item(),
        "grad_along_v2": db.mean().item(),
    }


def direction_vs_channels(
    net: nn.Module, x: torch.Tensor, u: torch.Tensor, channels: list[int]
) -> dict[str, float]:
    """Reliance on one direction against a block of channels, e.g. a synthetic D(v) channel
    against the CIFAR channels of a CIFAR (+) D(v) image: the mean over `x` of
    atan2(|grad f restricted to `channels`|, |grad f . u|) in degrees (0 = only along unit `u`,
    90 = only through `channels`)."""
    g = input_gradients(net, x)
    along = (g.flatten(1) @ u.flatten()).abs()
    block = g[:, channels].flatten(1).norm(dim=1)
    return {
        "reliance_deg": torch.rad2deg(torch.atan2(block, along)).mean().item(),
        "grad_along_v": along.mean().item(),
        "grad_on_channels": block.mean().item(),
    }


@torch.no_grad()
def margins_along(
    net: nn.Module,
    x: torch.Tensor,
    u: torch.Tensor,
    t_max: float,
    steps: int = 200,
    batch_size: int = 4096,
) -> torch.Tensor:
    """(n,) distance from each point to the nearest sign change of f along +-u (unit).

    Scans |t| <= t_max on a grid and interpolates linearly inside the first bracketing step;
    points with no sign change within t_max get inf (not found: the boundary, if any, is
    farther), never t_max, which would read as a distance.
    """
    net.eval()
    t = torch.linspace(0, t_max, steps + 1, device=x.device)
    per_chunk = max(1, batch_size // (steps + 1))
    return torch.cat([_margins(net, xc, u, t) for xc in x.split(per_chunk)])


def _margins(net: nn.Module, x: torch.Tensor, u: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    best = torch.full((len(x),), float("inf"), device=x.device)
    for sign in (1.0, -1.0):
        pts = x[:, None] + sign * t.reshape(1, -1, *[1] * u.dim()) * u  # (n, steps+1, c, h, w)
        f = logit_difference(net, pts.flatten(0, 1)).reshape(len(x), -1)
        flip = (f[:, :1].sign() != f[:, 1:].sign()) & (f[:, :1] != 0)  # (n, steps)
        k = flip.float().argmax(1)  # first step whose end has the other sign
        f0 = f.gather(1, k[:, None])[:, 0]
        f1 = f.gather(1, (k + 1)[:, None])[:, 0]
        dist = t[k] + (f0 / (f0 - f1)).clamp(0, 1) * (t[1] - t[0])
        best = torch.where(flip.any(1), torch.minimum(best, dist), best)
    return best


def jacobian_norm(net: nn.Module, x: torch.Tensor, batch_size: int = 500) -> float:
    """Mean over `x` of the Frobenius norm of d softmax(net(x)) / dx."""
    net.eval()
    total = 0.0
    for chunk in x.split(batch_size):
        chunk = chunk.detach().clone().requires_grad_(True)
        p = F.softmax(net(chunk), dim=1)  # (n, classes)
        sq = torch.zeros(len(chunk), device=x.device)
        for c in range(p.shape[1]):
            (g,) = torch.autograd.grad(p[:, c].sum(), chunk, retain_graph=c < p.shape[1] - 1)
            sq += g.flatten(1).pow(2).sum(1)
        total += sq.sqrt().sum().item()
    return total / len(x)


@contextmanager
def relu_patterns(net: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect, per forward pass, the on/off pattern of every nn.ReLU module's output."""
    captured: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: captured.append((out > 0).flatten(1)))
        for m in net.modules()
        if isinstance(m, nn.ReLU)
    ]
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def activation_patterns(net: nn.Module, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """(n, units) bool: which ReLU units are active at each point; (n, 0) without ReLUs."""
    net.eval()
    rows = []
    with relu_patterns(net) as captured:
        for chunk in x.split(batch_size):
            captured.clear()
            net(chunk)
            rows.append(
                torch.cat(captured, 1)
                if captured
                else torch.zeros(len(chunk), 0, dtype=bool, device=chunk.device)
            )
    return torch.cat(rows)


def count_transitions(net: nn.Module, path: torch.Tensor, closed: bool = True) -> int:
    """Sum over consecutive points of `path` (k, ...) of the Hamming distance between their
    activation patterns, including last -> first when `closed`."""
    pat = activation_patterns(net, path)
    nxt = pat.roll(-1, 0) if closed else pat[1:]
    cur = pat if closed else pat[:-1]
    return int((cur != nxt).sum().item())


def ellipse(center: torch.Tensor, u: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    """(k, ...) points center + cos(t) u + sin(t) w, t = 2 pi i / k."""
    t = torch.arange(k, dtype=center.dtype, device=center.device) * (2 * math.pi / k)
    shape = (k, *[1] * center.dim())
    return center + t.cos().reshape(shape) * u + t.sin().reshape(shape) * w


def _orthogonal_like(u: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A random direction orthogonal to u with the same norm."""
    r = torch.randn(u.shape, generator=gen, dtype=u.dtype, device=gen.device).to(u.device)
    r = r - (r.flatten() @ u.flatten()) / u.flatten().pow(2).sum() * u
    return r / r.norm() * u.norm()


def trajectories(
    x: torch.Tensor, y: torch.Tensor, n: int, k: int, gen: torch.Generator
) -> dict[str, list[torch.Tensor]]:
    """Closed ellipses of k points: through two points of the same class, of different
    classes (at t = 0 and t = pi), and random ellipses of matching radius around data points."""
    out: dict[str, list[torch.Tensor]] = {"same_class": [], "diff_class": [], "random": []}
    radii = []
    for kind in ("same_class", "diff_class"):
        while len(out[kind]) < n:
            i, j = torch.randint(len(x), (2,), generator=gen, device=gen.device).tolist()
            if i == j or (y[i] == y[j]) != (kind == "same_class"):
                continue
            u = (x[i] - x[j]) / 2
            out[kind].append(ellipse((x[i] + x[j]) / 2, u, _orthogonal_like(u, gen), k))
            radii.append(u.norm())
    radius = torch.stack(radii).mean()
    for _ in range(n):
        c = x[torch.randint(len(x), (1,), generator=gen, device=gen.device).item()]
        u = torch.randn(c.shape, generator=gen, dtype=c.dtype, device=gen.device).to(c.device)
        u = u / u.norm() * radius
        out["random"].append(ellipse(c, u, _orthogonal_like(u, gen), k))
    return out


def transition_counts(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, n: int, k: int, gen: torch.Generator
) -> dict[str, float]:
    """Mean transition count per kind of closed trajectory; NaN for a network without
    nn.ReLU modules (the count is defined for ReLU activation patterns only, and 0 would
    read as a smooth function)."""
    paths = trajectories(x, y, n, k, gen)
    if not any(isinstance(m, nn.ReLU) for m in net.modules()):
        return {f"transitions_{kind}": float("nan") for kind in paths}
    return {
        f"transitions_{kind}": sum(count_transitions(net, p) for p in ps) / len(ps)
        for kind, ps in paths.items()
    }
