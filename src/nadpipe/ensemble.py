"""Seed ensembles: several independently seeded models of one architecture trained as one batched
model (torch.func.stack_module_state + vmap), each with its own initialisation, data and batch
order, so the result equals separate training up to floating-point tolerance.

SGD, momentum and weight decay act element-wise, so one optimizer over the stacked parameters is
the members' optimizers side by side; gradient clipping is applied per member. Models with
BatchNorm update running statistics in place, which vmap cannot batch: those are trained one
after another (still one job, one start-up).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from .io import generator, save_torch
from .train import (
    TrainSettings,
    check_divergence,
    epoch_bar,
    epoch_record,
    load_checkpoint,
    log_epoch,
    set_lr,
    total_steps,
    train_model,
    triangular_lr,
)


def can_vectorize(net: nn.Module) -> bool:
    """Whether `net` can be trained inside vmap (no in-place running statistics)."""
    return not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())


def _clip_per_member(grads: list[torch.Tensor], max_norm: float) -> None:
    """clip_grad_norm_ for each member (dim 0) of stacked gradients, as torch computes it."""
    sq = sum(g.flatten(1).pow(2).sum(1) for g in grads)  # (members,)
    coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.reshape(-1, *[1] * (g.dim() - 1)))


def train_ensemble(
    nets: list[nn.Module],
    xs: torch.Tensor,
    ys: torch.Tensor,
    settings: TrainSettings,
    seeds: list[int],
    progress: bool = True,
    checkpoint: str | None = None,
) -> list[list[dict]]:
    """Train `nets` in place, member m on `xs[m]` (n, c, h, w), `ys[m]` (n,) with batch order
    seeded by `seeds[m]`, as `train_model` would one by one. Returns each member's history.
    With `checkpoint`, the state after every epoch is written there and resumed from."""
    if not all(can_vectorize(n) for n in nets):
        return [
            train_model(net, x, y, settings, seed, progress, checkpoint and f"{checkpoint}.{k}")
            for k, (net, x, y, seed) in enumerate(zip(nets, xs, ys, seeds, strict=True))
        ]
    m, n = len(nets), xs.shape[1]
    device = xs.device
    for net in nets:
        net.train()
    params, buffers = stack_module_state(nets)  # name -> (members, ...) leaf tensors
    base = copy.deepcopy(nets[0]).to("meta")

    def member_loss(p, b, x, y):
        out = functional_call(base, (p, b), (x,))
        return F.cross_entropy(out, y), out

    batched = vmap(member_loss)
    opt = torch.optim.SGD(
        params.values(), lr=0.0, momentum=settings.momentum, weight_decay=settings.weight_decay
    )
    orders = [generator("batch-order", s) for s in seeds]
    total = total_steps(n, settings)
    rows_of = torch.arange(m, device=device)[:, None]
    histories: list[list[dict]] = [[] for _ in range(m)]
    diverged = [False] * m
    step = done = 0
    state = load_checkpoint(checkpoint, settings, seeds)
    if state is not None:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state["params"][name])
        for name, b in buffers.items():
            b.copy_(state["buffers"][name])
        opt.load_state_dict(state["optimizer"])
        for g, st in zip(orders, state["orders"], strict=True):
            g.set_state(st)
        torch.set_rng_state(state["torch_rng"])
        histories, diverged, step, done = (
            state[k] for k in ("histories", "diverged", "step", "done")
        )
    bar = epoch_bar(done, settings, progress, desc=f"train {m} seeds")
    for epoch in bar:
        start = time.perf_counter()
        loss_sum = torch.zeros(m, device=device)
        correct = torch.zeros(m, device=device, dtype=torch.long)
        perms = torch.stack([torch.randperm(n, generator=g) for g in orders]).to(device)
        for idx in perms.split(settings.batch_size, dim=1):  # (members, batch)
            lr = triangular_lr(step, total, settings.lr_max)
            set_lr(opt, lr)
            yb = ys[rows_of, idx]
            loss, out = batched(params, buffers, xs[rows_of, idx], yb)  # (m,), (m, batch, k)
            grads = torch.autograd.grad(loss.sum(), list(params.values()))
            if settings.grad_clip is not None:
                _clip_per_member(list(grads), settings.grad_clip)
            for p, g in zip(params.values(), grads, strict=True):
                p.grad = g
            opt.step()
            loss_sum += loss.detach() * idx.shape[1]
            correct += (out.detach().argmax(-1) == yb).sum(1)
            step += 1
        for k in range(m):
            if diverged[k]:
                continue  # a diverged member's record stops where separate training would
            row = epoch_record(epoch, loss_sum[k].item(), correct[k].item(), n, lr, start)
            histories[k].append(row)
            if progress:
                log_epoch(row, settings, bar, prefix=f"seed {seeds[k]}: ")
            diverged[k] = check_divergence(histories[k], settings, prefix=f"seed {seeds[k]}: ")
        if all(diverged):
            break
        if checkpoint:
            save_torch(
                {
                    "params": {k: v.detach() for k, v in params.items()},
                    "buffers": buffers,
                    "optimizer": opt.state_dict(),
                    "orders": [g.get_state() for g in orders],
                    "torch_rng": torch.get_rng_state(),
                    "histories": histories,
                    "diverged": diverged,
                    "step": step,
                    "done": epoch + 1,
                    "settings": asdict(settings),
                    "seed": seeds,
                },
                checkpoint,
            )
    with torch.no_grad():
        for k, net in enumerate(nets):
            for name, p in net.named_parameters():
                p.copy_(params[name][k])
    return histories
