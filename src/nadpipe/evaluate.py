"""Evaluation in and out of distribution: all channels, or some of them zeroed."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# condition -> channels kept (the others are zeroed); channel 0 carries D(v1), channel 1 D(v2)
CONDITIONS: dict[str, tuple[int, ...]] = {
    "both": (0, 1),  # in distribution
    "ch1_only": (0,),  # channel 2 zeroed
    "ch2_only": (1,),  # channel 1 zeroed
}


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
    net: nn.Module,
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]],
    batch_size: int = 2000,
    conditions: dict[str, tuple[int, ...]] | None = None,
) -> list[dict]:
    """One row per (split, condition): accuracy and loss with the condition's channels kept
    (`conditions`: name -> channels kept; default the NAD-pair study's `CONDITIONS`)."""
    rows = []
    for split, (x, y) in splits.items():
        for condition, keep in (conditions or CONDITIONS).items():
            acc, loss = accuracy_and_loss(net, keep_channels(x, keep), y, batch_size)
            rows.append({"split": split, "condition": condition, "accuracy": acc, "loss": loss})
    return rows
