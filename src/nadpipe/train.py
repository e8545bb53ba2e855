"""Training: one loop for one model or a seed ensemble (several models of one architecture, each
with its own initialisation, data and batch order, stacked with torch.func and trained as one).

SGD with momentum and weight decay, cross-entropy, optional gradient-norm clipping (per member),
and a per-step learning rate through torch.optim.lr_scheduler (its state is checkpointed with
the optimizer): "triangular" 0 -> lr_max -> 0 (underspecification paper) or "linear_decay"
lr_max -> 0 (NAD paper's code), each evaluated at the end of the step as those codes do.
Data live as tensors on the device and batches are slices of a permutation drawn on the CPU from
a seeded generator, so the same seeds give the same numbers on CPU. An ensemble equals separate
training up to floating-point tolerance: SGD acts element-wise, so one optimizer over stacked
parameters is the members' optimizers side by side.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from .backend import (
    accelerated,
    autocast_available,
    autocast_in_effect,
    cuda_rng_state,
    on_cpu,
    set_cuda_rng_state,
)
from .io import ArtifactError, derive_seed, generator, load_torch, save_torch
from .log import progress_bar, say
from .models import build
from .settings import ModelSpec, TrainSettings, per_model, plain, typed


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or inf and `fail_on_divergence` is set."""


def lr_factor(schedule: str, total: int) -> Callable[[int], float]:
    """The multiplier of lr_max used in step s (0-based) of `total`, evaluated at the end of
    the step, with t = (s + 1) / total: triangular 2t up to t = 1/2, then 2(1 - t);
    linear_decay 1 - t."""

    def triangular(s: int) -> float:
        t = (s + 1) / total
        return 2 * t if t <= 0.5 else 2 * (1 - t)

    def linear_decay(s: int) -> float:
        return 1 - (s + 1) / total

    return {"triangular": triangular, "linear_decay": linear_decay}[schedule]


def total_steps(n: int, settings: TrainSettings) -> int:
    """Optimizer steps of a whole training on `n` samples."""
    return settings.epochs * -(-n // settings.batch_size)


def diverged_epoch(history: list[dict]) -> int | None:
    """The first epoch whose mean loss is not finite, or None."""
    return next((r["epoch"] for r in history if not math.isfinite(r["loss"])), None)


def can_stack(net: nn.Module, x: torch.Tensor) -> bool:
    """Whether copies of `net` can be trained together inside vmap: no in-place running
    statistics (batch norm) and no random operation in its training-mode forward (dropout, noise:
    vmap would refuse it, "called random operation while in randomness error mode"). Found by
    running two stacked copies in training mode on the first two samples of `x` (n, C, H, W): a
    random operation raises before it draws, so no generator moves."""
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()):
        return False
    was = net.training
    net.train()
    try:
        params, buffers = stack_module_state([net, net])
        base = copy.deepcopy(net).to("meta")
        probe = vmap(lambda p, b, v: functional_call(base, (p, b), (v,)), randomness="error")
        with torch.no_grad():
            probe(params, buffers, x[:2].expand(2, *x[:2].shape))
        return True
    except RuntimeError as e:
        if "random" in str(e) or "in-place" in str(e) or "inplace" in str(e):
            return False
        raise
    finally:
        net.train(was)


def stacks(nets: list[nn.Module], xs: torch.Tensor, settings: TrainSettings) -> bool:
    """Whether `train` trains `nets` as one stacked ensemble: more than one, stackable, and not
    `per_model`."""
    return len(nets) > 1 and not per_model(settings) and can_stack(nets[0], xs[0])


def applied(settings: TrainSettings, device: torch.device, members: int) -> dict:
    """The speed settings that take effect, as each record states them: bf16 autocast
    (`precision`: auto, or the bf16 switch, on an accelerator with autocast; bf16 wherever torch
    has autocast, the CPU too; fp32 never); channels-last on an accelerator and compile, for a
    model trained alone (a stacked ensemble is one vmapped function: `train` runs the members
    one after another when either is asked for)."""
    fast = accelerated(device)
    autocast = autocast_available(device)
    bf16 = {"fp32": False, "bf16": autocast, "auto": fast and autocast}[settings.precision]
    return {
        "bf16": bool(bf16 or (settings.bf16 and fast and autocast)),
        "channels_last": bool(settings.channels_last and fast and members == 1),
        "compile": bool(settings.compile and members == 1),
    }


def init_seed(seed: int, *key: object) -> None:
    """Seed torch's global generator before building a model, so its initialisation is fixed."""
    torch.manual_seed(derive_seed("init", seed, *key))


def _autocast(device: torch.device, on: bool):
    """bf16 autocast on `device` when `on` (see `applied`), else nothing (autocast refuses a
    device type without it even when disabled)."""
    return torch.autocast(device.type, torch.bfloat16) if on else contextlib.nullcontext()


# -- the models being trained ---------------------------------------------------------------


class _One:
    """One model, trained as a plain module (its own forward, autocast, compile, clipping)."""

    def __init__(self, net: nn.Module, settings: TrainSettings, device: torch.device):
        on = applied(settings, device, 1)
        if on["channels_last"]:
            net = net.to(memory_format=torch.channels_last)
        self.nets = [net]
        self.model = torch.compile(net) if on["compile"] else net
        self.autocast = _autocast(device, on["bf16"])
        self.channels_last = on["channels_last"]
        self.params = list(net.parameters())
        self.device, self.ran = device, "off"  # the autocast a step ran with (`loss`)

    def prepare(self, xs: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            return xs[0].contiguous(memory_format=torch.channels_last)[None]
        return xs

    def loss(self, xs, ys, idx) -> tuple[torch.Tensor, torch.Tensor]:
        """(1,) loss and (1, batch, classes) outputs of the batch `idx` (1, batch)."""
        with self.autocast:
            self.ran = autocast_in_effect(self.device)
            out = self.model(xs[0][idx[0]])
            loss = F.cross_entropy(out, ys[0][idx[0]])
        return loss[None], out[None]

    def backward(self, loss: torch.Tensor, clip: float | None) -> None:
        for p in self.params:
            p.grad = None
        loss.sum().backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(self.params, clip, foreach=True)

    def state(self) -> dict:
        return {"model": self.nets[0].state_dict()}

    def load(self, state: dict) -> None:
        self.nets[0].load_state_dict(state["model"])

    def finish(self) -> None:
        pass


class _Stacked:
    """Several models of one architecture as stacked parameters, evaluated with vmap."""

    def __init__(self, nets: list[nn.Module], settings: TrainSettings, device: torch.device):
        self.nets = nets
        bf16 = applied(settings, device, len(nets))["bf16"]
        self.autocast = _autocast(device, bf16)
        self.device, self.ran = device, "off"  # the autocast a step ran with (`loss`)
        for net in nets:
            net.train()
        self.stacked, self.buffers = stack_module_state(nets)  # name -> (members, ...)
        self.params = list(self.stacked.values())
        base = copy.deepcopy(nets[0]).to("meta")

        def member(p, b, x, y):
            out = functional_call(base, (p, b), (x,))
            return F.cross_entropy(out, y), out

        self.batched = vmap(member)
        self.rows = torch.arange(len(nets), device=self.params[0].device)[:, None]

    def prepare(self, xs: torch.Tensor) -> torch.Tensor:
        return xs

    def loss(self, xs, ys, idx):
        """(members,) losses and (members, batch, classes) outputs of the batches `idx`."""
        with self.autocast:
            self.ran = autocast_in_effect(self.device)
            return self.batched(self.stacked, self.buffers, xs[self.rows, idx], ys[self.rows, idx])

    def backward(self, loss: torch.Tensor, clip: float | None) -> None:
        grads = torch.autograd.grad(loss.sum(), self.params)
        if clip is not None:  # clip_grad_norm_ of each member, as torch computes it
            sq = sum(g.flatten(1).pow(2).sum(1) for g in grads)  # (members,)
            coef = (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.reshape(-1, *[1] * (g.dim() - 1)))
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g

    def state(self) -> dict:
        return {
            "params": {k: v.detach() for k, v in self.stacked.items()},
            "buffers": dict(self.buffers),
        }

    def load(self, state: dict) -> None:
        with torch.no_grad():
            for name, p in self.stacked.items():
                p.copy_(state["params"][name])
            for name, b in self.buffers.items():
                b.copy_(state["buffers"][name])

    def finish(self) -> None:
        """Write the trained members back into their modules."""
        with torch.no_grad():
            for k, net in enumerate(self.nets):
                for name, p in net.named_parameters():
                    p.copy_(self.stacked[name][k])


# -- checkpoints ------------------------------------------------------------------------------


def _differences(found: dict, expected: dict) -> str:
    keys = sorted(set(found) | set(expected))
    return ", ".join(k for k in keys if found.get(k) != expected.get(k))


def load_checkpoint(path: str | None, fingerprint: dict) -> dict | None:
    """The checkpoint at `path` if everything the result depends on is what it was written for
    (`fingerprint`: data, model, training settings, seeds, library); otherwise None, with one
    line saying why it is discarded."""
    if not path or not os.path.exists(path):
        return None
    try:
        state = load_torch(path)
    except ArtifactError as e:  # written atomically, but a disk can still fail
        say(f"discarding unreadable checkpoint {path} ({e}); training from scratch")
        return None
    found = state.get("fingerprint") if isinstance(state, dict) else None
    if found != fingerprint:
        why = _differences(found or {}, fingerprint) or "another format"
        say(f"discarding checkpoint {path}: written for other {why}; training from scratch")
        return None
    say(f"resuming from {path} after epoch {state['done']}")
    return state


# -- the loop ---------------------------------------------------------------------------------


def train(
    nets: list[nn.Module],
    xs: torch.Tensor,
    ys: torch.Tensor,
    settings: TrainSettings,
    orders: list[int],
    checkpoint: str | None = None,
    fingerprint: dict | None = None,
    progress: bool = True,
) -> list[list[dict]]:
    """Train `nets` in place, member m on `xs[m]` (n, C, H, W) and `ys[m]` (n,) int64 (on the
    nets' device), its batch order seeded by `orders[m]`. Returns each member's history, one
    dict per epoch (epoch, mean loss, train accuracy, last learning rate, seconds).

    Several stackable models (`can_stack`, and neither channels-last nor compile asked for)
    train as one batched model; the others one after another. With `checkpoint`, the state
    after every epoch is written there atomically, and a run that finds a checkpoint with the
    same `fingerprint` resumes from it: the result equals an uninterrupted run exactly on CPU.
    """
    if len(nets) > 1 and not stacks(nets, xs, settings):
        return _one_after_another(nets, xs, ys, settings, orders, checkpoint, fingerprint, progress)
    m, n = len(nets), xs.shape[1]
    device = xs.device
    members = _One(nets[0], settings, device) if m == 1 else _Stacked(nets, settings, device)
    xs = members.prepare(xs)
    opt = torch.optim.SGD(
        members.params,
        lr=settings.lr_max,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    lr_at = lr_factor(settings.lr_schedule, total_steps(n, settings))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gens = [generator("batch-order", o) for o in orders]
    histories: list[list[dict]] = [[] for _ in range(m)]
    diverged = [False] * m
    done = 0
    fingerprint = fingerprint or {}
    state = load_checkpoint(checkpoint, fingerprint)
    if state is not None:
        histories, diverged, done = _resume(state, members, opt, schedule, gens)
    tag = "train" if m == 1 else f"train {m} seeds"
    bar = progress_bar(settings.epochs, tag, unit="epoch", enabled=progress)
    if done:
        bar.update(done)
    for epoch in range(done, settings.epochs):
        for net in nets:
            net.train()
        start = time.perf_counter()
        loss_sum, correct, lr = _epoch(members, opt, schedule, xs, ys, gens, settings)
        seconds = time.perf_counter() - start
        for k in range(m):
            if not diverged[k]:  # a diverged member's record stops where separate training would
                row = {
                    "epoch": epoch + 1,
                    "loss": loss_sum[k].item() / n,
                    "train_accuracy": correct[k].item() / n,
                    "lr_end": lr,
                    "seconds": seconds,
                    "autocast": members.ran,  # observed in the steps, not asked
                }
                who = "" if m == 1 else f"seed {k}: "
                diverged[k] = _record(histories[k], row, who, settings, progress)
        bar.update(1)
        if all(diverged):
            break
        if checkpoint:
            done = (histories, diverged, epoch + 1)
            save_torch(_state(fingerprint, members, opt, schedule, gens, done), checkpoint)
    bar.close()
    members.finish()
    return histories


def _one_after_another(nets, xs, ys, settings, orders, checkpoint, fingerprint, progress):
    """`train` of each member alone, with a checkpoint and fingerprint of its own."""
    each = enumerate(zip(nets, xs, ys, orders, strict=True))
    return [
        train(
            [net],
            x[None],
            y[None],
            settings,
            [o],
            checkpoint and f"{checkpoint}.{k}",
            fingerprint and {**fingerprint, "member": k},
            progress,
        )[0]
        for k, (net, x, y, o) in each
    ]


def _state(fingerprint: dict, members, opt, schedule, gens, progress: tuple) -> dict:
    """A checkpoint: everything `_resume` needs to go on as if never stopped; `progress`:
    (histories, diverged, epochs done)."""
    histories, diverged, done = progress
    return {
        "fingerprint": fingerprint,
        "members": members.state(),
        "optimizer": opt.state_dict(),
        "schedule": schedule.state_dict(),
        "orders": [g.get_state() for g in gens],
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": cuda_rng_state(),
        "histories": histories,
        "diverged": diverged,
        "done": done,
    }


def _epoch(members, opt, schedule, xs, ys, gens, settings: TrainSettings):
    """One epoch's steps of every member: (summed loss per member, correct per member, the last
    step's learning rate), the sums kept on the device (no host read inside the steps)."""
    m, n = xs.shape[0], xs.shape[1]
    device = xs.device
    rows = torch.arange(m, device=device)[:, None]
    loss_sum = torch.zeros(m, device=device)
    correct = torch.zeros(m, device=device, dtype=torch.long)
    # drawn on the generators' device (the CPU): the same order on every device
    perms = torch.stack([torch.randperm(n, generator=g, device=g.device) for g in gens])
    perms = perms.to(device)
    lr = opt.param_groups[0]["lr"]
    for idx in perms.split(settings.batch_size, dim=1):  # (members, batch)
        lr = opt.param_groups[0]["lr"]
        loss, out = members.loss(xs, ys, idx)
        members.backward(loss, settings.grad_clip)
        opt.step()
        schedule.step()
        loss_sum += loss.detach() * idx.shape[1]
        correct += (out.detach().argmax(-1) == ys[rows, idx]).sum(1)
    return loss_sum, correct, lr


def _resume(state: dict, members, opt, schedule, gens) -> tuple[list, list, int]:
    """Put a checkpoint's `state` back into the members, optimiser, schedule, batch-order
    generators and torch's generators; (histories, diverged, epochs done)."""
    members.load(state["members"])
    opt.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    for g, s in zip(gens, state["orders"], strict=True):
        g.set_state(s)
    torch.set_rng_state(state["torch_rng"])  # user models may draw (e.g. dropout)
    set_cuda_rng_state(state.get("cuda_rng", []))  # ... on the GPU too (VGG's dropout)
    return state["histories"], state["diverged"], state["done"]


def _record(history: list, row: dict, who: str, settings: TrainSettings, progress: bool) -> bool:
    """Append one member's epoch `row` to its `history`, say it, and whether the member diverged
    (a loss that is not finite; train.fail_on_divergence raises instead)."""
    history.append(row)
    if progress:
        say(
            f"{who}epoch {row['epoch']}/{settings.epochs}: train loss {row['loss']:.4f}, "
            f"train accuracy {row['train_accuracy']:.4f}, lr {row['lr_end']:.4f} "
            f"({row['seconds']:.2f}s)"
        )
    if math.isfinite(row["loss"]):
        return False
    msg = f"{who}training diverged: loss {row['loss']} in epoch {row['epoch']}"
    if settings.fail_on_divergence:
        raise TrainingDiverged(msg + " (train.fail_on_divergence is set)")
    say(msg + "; stopping this training and recording it")
    return True


def train_one(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    seed: int,
    progress: bool = False,
    checkpoint: str | None = None,
) -> list[dict]:
    """Train one model on `x` (n, C, H, W), `y` (n,) with batch order seeded by `seed`."""
    return train([net], x[None], y[None], settings, [seed], checkpoint, None, progress)[0]


def model_stacks(spec: ModelSpec) -> bool:
    """`can_stack` of a model spec: a probe of the architecture on the CPU, once per process
    (the main process plans every cell's batch; nadpipe.batching.stackable asks)."""
    return _model_stacks(json.dumps(plain(spec), sort_keys=True))


@functools.cache
def _model_stacks(spec: str) -> bool:
    model = typed(ModelSpec, json.loads(spec))
    with on_cpu():
        return can_stack(build(model), torch.zeros(2, *model.shape))
