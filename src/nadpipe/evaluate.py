"""Evaluation of a trained model: accuracy and loss under a study's conditions (channels kept,
the others zeroed), and the per-model measures a study asks for (`MEASURES`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import geometry as geo
from .data import Splits
from .io import generator
from .models import relu_units
from .settings import AnalysisSettings


def keep_channels(x: torch.Tensor, keep: tuple[int, ...]) -> torch.Tensor:
    """A copy of `x` (n, c, h, w) with every channel not in `keep` set to zero."""
    mask = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
    mask[list(keep)] = 1
    return x * mask[None, :, None, None]


@torch.no_grad()
def accuracy_and_loss(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 2000
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `net` in eval mode on `x`, `y`."""
    net.eval()
    correct = torch.zeros((), dtype=torch.long, device=x.device)
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    for xb, yb in zip(x.split(batch_size), y.split(batch_size), strict=True):
        out = net(xb)
        correct += (out.argmax(1) == yb).sum()
        loss += F.cross_entropy(out.double(), yb, reduction="sum")
    return correct.item() / len(x), loss.item() / len(x)


def evaluate_conditions(
    net: nn.Module, splits: Splits, batch_size: int, conditions: dict[str, tuple[int, ...]]
) -> list[dict]:
    """One row per (split, condition): accuracy and loss with the condition's channels kept."""
    rows = []
    for split, (x, y) in splits.items():
        for condition, keep in conditions.items():
            acc, loss = accuracy_and_loss(net, keep_channels(x, keep), y, batch_size)
            rows.append({"split": split, "condition": condition, "accuracy": acc, "loss": loss})
    return rows


@dataclass
class Context:
    """What a measure gets besides the model: the data on the device, the study's input-space
    directions (e.g. u1, u2 of a NAD pair), the NADs, the settings and the random stream key."""

    splits: Splits
    directions: dict
    vectors: torch.Tensor | None
    nad_shape: tuple[int, int, int]
    settings: AnalysisSettings
    stream: tuple  # (arch, *study stream, seed) of the trajectories' generator


Measure = Callable[[nn.Module, Context], tuple[dict, dict]]  # -> (columns, arrays)


def geometry(net: nn.Module, ctx: Context) -> tuple[dict, dict]:
    """Channel reliance, margins along u1 and u2, the Jacobian norm (test and train),
    activation-pattern transitions, and the decision boundary's cross-sections in the plane of
    u1 and u2 (a study with two channel blocks: the NAD pairs)."""
    s, d = ctx.settings, ctx.directions
    device = next(net.parameters()).device
    u1, u2 = d["u1"].to(device), d["u2"].to(device)
    x_test, y_test = (t[: s.n_points] for t in ctx.splits["test"])
    x_train = ctx.splits["train"][0][: s.n_points]
    row = dict(geo.channel_reliance(net, x_test, u1, u2))
    for name, u in (("v1", u1), ("v2", u2)):
        m = geo.margins_along(net, x_test, u, s.margin_max, s.margin_steps, s.batch_size)
        row[f"margin_{name}"] = m.median().item()  # inf: most points have no boundary in reach
        row[f"margin_{name}_found"] = torch.isfinite(m).double().mean().item()
    row["margin_max"] = s.margin_max  # the search's reach: the figures' common scale
    row["jacobian_norm_test"] = geo.jacobian_norm(net, x_test, s.batch_size)
    row["jacobian_norm_train"] = geo.jacobian_norm(net, x_train, s.batch_size)
    tr = s.transitions
    gen = generator("trajectories", s.seed, *ctx.stream)
    row.update(geo.transition_counts(net, x_test, y_test, tr.n_trajectories, tr.n_points, gen))
    row["relu_units"] = relu_units(net, x_test)
    cs = s.cross_section
    grid = torch.linspace(-cs.range, cs.range, cs.resolution, device="cpu")  # written as is
    a, b = (grid * d["eps1"]).to(device), (grid * d["eps2"]).to(device)
    values = geo.cross_section(net, x_test[: cs.n_points], u1, u2, a, b, s.batch_size)
    arrays = {
        "values": values.cpu().numpy(),  # (points, R, R): rows along u2, columns along u1
        "a": grid.numpy(),  # coordinates along u1 in units of eps1
        "b": grid.numpy(),  # coordinates along u2 in units of eps2
        "labels": y_test[: cs.n_points].cpu().numpy(),
    }
    return row, arrays


def cifar_reliance(net: nn.Module, ctx: Context) -> tuple[dict, dict]:
    """The angle between the input gradient's component along the synthetic direction u and
    its norm on the CIFAR channels (CIFAR (+) D(v))."""
    d = ctx.directions
    device = next(net.parameters()).device
    x = ctx.splits["test"][0][: ctx.settings.n_points]
    found = geo.direction_vs_channels(net, x, d["u"].to(device), d["block"])
    return {f"v_vs_cifar_{k}": v for k, v in found.items()}, {}


def project_out_band(
    x: torch.Tensor, vectors: torch.Tensor, band: tuple[int, int], keep: bool = False
) -> torch.Tensor:
    """`x` (n, C', H, W) with the components along NADs band[0]..band[1] (inclusive) removed
    from each block of the NADs' channels (C' a multiple of the NADs' C); with `keep`, only
    those components are kept (the band's complement removed)."""
    n = len(x)
    u = vectors[band[0] : band[1] + 1].to(x.device, torch.float64)  # (k, d)
    d = u.shape[1]
    blocks = x.double().reshape(n, -1, d)  # (n, blocks, d)
    inside = (blocks @ u.T) @ u
    out = inside if keep else blocks - inside
    return out.reshape(x.shape).to(x.dtype)


def nad_bands(net: nn.Module, ctx: Context) -> tuple[dict, dict]:
    """Test accuracy with the test inputs' components along each band of NADs removed, and with
    only that band kept (no retraining): which NADs the trained model uses."""
    x, y = ctx.splits["test"]
    row = {}
    count, d = ctx.vectors.shape
    if x[0].numel() % d:
        raise ValueError(f"inputs of {x[0].numel()} coordinates are not blocks of the NADs' {d}")
    for lo, hi in ctx.settings.nad_bands.bands:
        if not 0 <= lo <= hi < count:  # the config check refuses these
            raise ValueError(f"NAD band [{lo}, {hi}] outside the {count} NADs")
        for keep, name in ((False, "without"), (True, "only")):
            xb = project_out_band(x, ctx.vectors, (lo, hi), keep)
            row[f"band_{name}_{lo}_{hi}"] = accuracy_and_loss(net, xb, y)[0]
    return row, {}


MEASURES: dict[str, Measure] = {
    "geometry": geometry,
    "cifar_reliance": cifar_reliance,
    "nad_bands": nad_bands,
}
