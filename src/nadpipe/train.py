"""Training: SGD with momentum, a triangular one-cycle learning rate, cross-entropy.

Data live as one tensor on the device and batches are random-permutation slices (no
DataLoader). The permutation is drawn on the CPU from a seeded generator, so the same seed gives
the same numbers on CPU.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from .io import ArtifactError, derive_seed, generator, load_torch, save_torch


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 50  # paper: 50 for MLP and LeNet, 30 for ResNet-18
    lr_max: float = 0.2  # peak of the triangular schedule (paper: 0.2 MLP/LeNet, 0.1 ResNet-18)
    momentum: float = 0.9
    weight_decay: float = 0.0  # paper: 0 for MLP/LeNet, 1e-5 for ResNet-18
    batch_size: int = 128
    grad_clip: float | None = 0.5  # max gradient norm per step, as the NAD code does; None: off
    bf16: bool = False  # bf16 autocast for forward and loss, on CUDA only
    channels_last: bool = False  # channels-last memory format, on CUDA only
    compile: bool = False  # torch.compile the model (pays off only for long runs)
    fail_on_divergence: bool = False  # raise on a NaN/inf loss instead of recording it


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or inf and `fail_on_divergence` is set."""


def diverged_epoch(history: list[dict]) -> int | None:
    """The first epoch whose mean loss is not finite, or None."""
    return next((r["epoch"] for r in history if not math.isfinite(r["loss"])), None)


def check_divergence(history: list[dict], settings: TrainSettings, prefix: str = "") -> bool:
    """True when the last epoch diverged (then training stops); raise if that is to fail."""
    if math.isfinite(history[-1]["loss"]):
        return False
    msg = f"{prefix}training diverged: loss {history[-1]['loss']} in epoch {history[-1]['epoch']}"
    if settings.fail_on_divergence:
        raise TrainingDiverged(msg + " (train.fail_on_divergence is set)")
    print(msg + "; stopping this training and recording it", flush=True)
    return True


def triangular_lr(step: int, total_steps: int, lr_max: float) -> float:
    """Learning rate after `step` (0-based) of `total_steps`: 0 -> lr_max over the first half,
    back to 0 over the second, evaluated at the end of the step as the reference code does."""
    t = (step + 1) / total_steps
    return lr_max * (2 * t if t <= 0.5 else 2 * (1 - t))


def total_steps(n: int, settings: TrainSettings) -> int:
    """Optimizer steps of a whole training on `n` samples."""
    return settings.epochs * -(-n // settings.batch_size)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def epoch_record(
    epoch: int, loss_sum: float, correct: int, n: int, lr: float, start: float
) -> dict:
    """The per-epoch history row: 1-based epoch, mean loss, train accuracy, last lr, seconds."""
    return {
        "epoch": epoch + 1,
        "loss": loss_sum / n,
        "train_accuracy": correct / n,
        "lr_end": lr,
        "seconds": time.perf_counter() - start,
    }


def epoch_bar(done: int, settings: TrainSettings, progress: bool, desc: str = "train") -> tqdm:
    """A tqdm bar over the remaining epochs (it starts at `done` after a resume)."""
    epochs = range(done, settings.epochs)
    return tqdm(epochs, desc, settings.epochs, initial=done, disable=not progress, file=sys.stderr)


def log_epoch(
    row: dict, settings: TrainSettings, bar: tqdm | None = None, prefix: str = ""
) -> None:
    """One plain line per epoch (readable in a log file), and the bar's loss and accuracy."""
    tqdm.write(
        f"{prefix}epoch {row['epoch']}/{settings.epochs} loss {row['loss']:.4f} "
        f"acc {row['train_accuracy']:.4f} lr {row['lr_end']:.4f} ({row['seconds']:.2f}s)",
        file=sys.stderr,
    )
    if bar is not None:
        bar.set_postfix(
            loss=f"{row['loss']:.4f}", acc=f"{row['train_accuracy']:.3f}", refresh=False
        )


def load_checkpoint(path: str | None, settings: TrainSettings, seed: object) -> dict | None:
    """The checkpoint at `path` if it belongs to this training (same settings and seed)."""
    if not path or not os.path.exists(path):
        return None
    try:
        state = load_torch(path)
    except ArtifactError as e:  # written atomically, but a disk can still fail
        print(f"ignoring unreadable checkpoint: {e}", flush=True)
        return None
    if state.get("settings") != asdict(settings) or state.get("seed") != seed:
        print(f"ignoring checkpoint {path}: written for other settings or seeds", flush=True)
        return None
    print(f"resuming from {path} after epoch {state['done']}", flush=True)
    return state


def train_model(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    seed: int,
    progress: bool = True,
    checkpoint: str | None = None,
) -> list[dict]:
    """Train `net` in place on `x` (n, c, h, w), `y` (n,) int64 (both on the net's device).

    Returns one dict per epoch: epoch, loss (mean over samples), train accuracy, lr, seconds.
    With `checkpoint`, the state after every epoch is written there atomically, and a run that
    finds it resumes from it: the result equals an uninterrupted run exactly on CPU.
    """
    cuda = x.device.type == "cuda"
    if cuda and settings.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model = torch.compile(net) if settings.compile else net
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda and settings.bf16)
    n = len(x)
    total = total_steps(n, settings)
    opt = torch.optim.SGD(
        net.parameters(), lr=0.0, momentum=settings.momentum, weight_decay=settings.weight_decay
    )
    order = generator("batch-order", seed)
    history: list[dict] = []
    step = 0
    state = load_checkpoint(checkpoint, settings, seed)
    if state is not None:
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        torch.set_rng_state(state["torch_rng"])  # user models may draw (e.g. dropout)
        history, step = state["history"], state["step"]
    bar = epoch_bar(len(history), settings, progress)
    for epoch in bar:
        start = time.perf_counter()
        net.train()
        loss_sum = torch.zeros((), device=x.device)
        correct = torch.zeros((), device=x.device, dtype=torch.long)
        for idx in torch.randperm(n, generator=order).to(x.device).split(settings.batch_size):
            lr = triangular_lr(step, total, settings.lr_max)
            set_lr(opt, lr)
            with autocast:
                out = model(x[idx])
                loss = F.cross_entropy(out, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if settings.grad_clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), settings.grad_clip, foreach=True)
            opt.step()
            # accumulate on the device: no host sync inside the step
            loss_sum += loss.detach() * len(idx)
            correct += (out.detach().argmax(1) == y[idx]).sum()
            step += 1
        row = epoch_record(epoch, loss_sum.item(), correct.item(), n, lr, start)
        history.append(row)
        if progress:
            log_epoch(row, settings, bar)
        if check_divergence(history, settings):  # once per epoch: no sync inside the steps
            break
        if checkpoint:
            save_torch(
                {
                    "model": net.state_dict(),
                    "optimizer": opt.state_dict(),
                    "order": order.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "history": history,
                    "step": step,
                    "done": epoch + 1,
                    "settings": asdict(settings),
                    "seed": seed,
                },
                checkpoint,
            )
    return history


def init_seed(seed: int, *key: object) -> None:
    """Seed torch's global generator before building a model, so its initialisation is fixed."""
    torch.manual_seed(derive_seed("init", seed, *key))
