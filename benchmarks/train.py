"""Training throughput on the NAD-pair data, measured side by side in one run, against the
hardware's own rate.

    python benchmarks/train.py                      # MLP, LeNet, ResNet-18 on the current device
    python benchmarks/train.py --models lenet --n 8192 --epochs 2
    python benchmarks/train.py --models resnet18 --variants   # bf16, channels-last, compile

Prints samples/s for (a) a reference loop in the style of the NAD paper's code (a torch Dataset
indexed per sample through a DataLoader with 2 workers, one model, .item() every batch), (b)
nadpipe's single-model loop, (c) nadpipe's 3-seed ensemble and (d) K models trained together as
grid cells are (nadpipe.batching; K = --together, 32 on a GPU), each model's samples
counted; the
ratios to (a); and, per model, the fraction of the rate of a float32 4096 x 4096 matmul
measured in the same run that (b) and (d) reach (FLOPs of a forward and backward pass counted
by torch.utils.flop_counter). --variants measures ResNet-18's single-model loop with bf16
autocast, channels-last and torch.compile against the bf16 matmul rate (on CUDA). Last, the
start-up cost of one pipeline job, cold and handed to the warm server (nadpipe.runner.worker).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode

from nadpipe.data import pair_splits
from nadpipe.io import generator
from nadpipe.models import build_model
from nadpipe.settings import Shape, TrainSettings
from nadpipe.train import init_seed, lr_factor, train, train_one


class PerSample(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def reference_loop(net, x, y, settings, device):
    """The NAD paper's training loop, as its code does it."""
    loader = DataLoader(
        PerSample(x, y),
        batch_size=settings.batch_size,
        shuffle=True,
        num_workers=2,
        pin_memory=device.type == "cuda",
    )
    opt = torch.optim.SGD(
        net.parameters(),
        lr=settings.lr_max,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    total = settings.epochs * len(loader)
    factor = lr_factor("triangular", total)
    step = 0
    for _ in range(settings.epochs):
        net.train()
        loss_sum = acc_sum = seen = 0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            opt.param_groups[0]["lr"] = settings.lr_max * factor(step)
            out = net(inputs)
            loss = F.cross_entropy(out, targets)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), settings.grad_clip)
            opt.step()
            loss_sum += loss.item() * len(targets)  # host sync every batch
            acc_sum += (out.max(1)[1] == targets).sum().item()
            seen += len(targets)
            step += 1


def data(n, seeds, device):
    g = torch.Generator().manual_seed(0)
    v1, v2 = (
        torch.nn.functional.normalize(torch.randn(1024, generator=g), dim=0) for _ in range(2)
    )
    shape, sizes = Shape(1, 32, 32), {"train": n}
    sets = [
        pair_splits(v1, v2, shape, 1.0, 0.5, 1.0, sizes, generator("pair-data", s))["train"]
        for s in seeds
    ]
    return torch.stack([x for x, _ in sets]).to(device), torch.stack([y for _, y in sets]).to(
        device
    )


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def fresh(model, seed, device):
    init_seed(seed, model)
    return build_model(model, 2, 2).to(device)


def matmul_rate(device, dtype=torch.float32) -> float:
    """FLOP/s of the best of five 4096 x 4096 matmuls of `dtype` on `device`, measured now
    (float32 with TF32 off, nadpipe.backend's default)."""
    a = torch.randn(4096, 4096, device=device, dtype=dtype)
    a @ a  # warm-up
    return 2 * 4096**3 / min(timed(lambda: a @ a, device) for _ in range(5))


def flops_per_sample(model: str, x: torch.Tensor, y: torch.Tensor) -> float:
    """FLOPs of a forward and backward pass of one sample (from a batch of 128)."""
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(fresh(model, 0, x.device)(x[:128]), y[:128]).backward()
    return fc.get_total_flops() / len(x[:128])


def startup_seconds() -> tuple[float, float]:
    """Median seconds of 5 starts of a job that does nothing: cold (a new Python importing the
    job modules, as a job without the warm server) and warm (a job handed to a server of
    nadpipe.runner.worker, as the workflow's jobs on one machine)."""
    job = "from nadpipe.jobtable import run_job; run_job('process')"
    cold, warm = [], []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import nadpipe.jobs, nadpipe.plots"], check=True)
        cold.append(time.perf_counter() - start)
    server = subprocess.run(
        [sys.executable, "-c", WARM.format(job=job)], check=True, capture_output=True, text=True
    )
    warm = [float(x) for x in server.stdout.split()]
    return statistics.median(cold), statistics.median(warm)


WARM = """
import os, subprocess, sys, time
from nadpipe.jobtable import start_server
from nadpipe.runner import worker
proc = start_server("/tmp/nadpipe-bench-{pid}")
while os.path.exists(os.environ[worker.ENV].rsplit(":", 1)[0] + ".starting"):
    time.sleep(0.05)
for _ in range(5):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "{job}"], check=True)
    print(time.perf_counter() - start)
proc.terminate()
""".replace("{pid}", str(os.getpid()))


def bench_model(model: str, n: int, epochs: int, device: torch.device, k: int) -> dict:
    """Samples/s of (a) the reference loop, (b) the single-model loop, (c) a 3-seed ensemble,
    (d) k models together (the ensemble, for models that vmap can stack)."""
    seeds = list(range(max(3, k)))
    xs, ys = data(n, seeds, device)
    s = TrainSettings(epochs=epochs, batch_size=128)
    x_cpu, y_cpu = xs[0].cpu(), ys[0].cpu()

    def ref():
        reference_loop(fresh(model, 0, device), x_cpu, y_cpu, s, device)

    def single():
        train_one(fresh(model, 0, device), xs[0], ys[0], s, 0)

    def ensemble(m):
        def run():
            nets = [fresh(model, j, device) for j in seeds[:m]]
            train(nets, xs[:m], ys[:m], s, seeds[:m], progress=False)

        return run

    samples = n * epochs
    row = {
        "model": model,
        "n": n,
        "ref": samples / timed(ref, device),
        "single": samples / timed(single, device),
        "ensemble3": 3 * samples / timed(ensemble(3), device),
        "together": k * samples / timed(ensemble(k), device),
        "flops": flops_per_sample(model, xs[0], ys[0]),
    }
    return row


def variants(n: int, device: torch.device) -> list[tuple[str, float]]:
    """ResNet-18 samples/s with bf16 autocast, channels-last and torch.compile (CUDA only)."""
    xs, ys = data(n, [0], device)
    out = []
    for name, extra in [
        ("float32 (precision fp32)", {"precision": "fp32"}),
        ("bf16 autocast (precision auto)", {}),
        ("bf16 + channels-last", {"channels_last": True}),
        ("bf16 + channels-last + compile", {"channels_last": True, "compile": True}),
    ]:  # fmt: skip
        s = TrainSettings(epochs=1, batch_size=128, **extra)
        train_one(fresh("resnet18", 0, device), xs[0], ys[0], s, 0)  # warm-up, compilation
        out.append((name, n / timed(lambda s=s: train_one(fresh("resnet18", 0, device), xs[0],
                                                          ys[0], s, 0), device)))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "lenet", "resnet18"])
    ap.add_argument("--n", type=int, default=None, help="samples per epoch (default by device)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--together", type=int, default=None, help="K of (d) (32 on a GPU, 8 CPU)")
    ap.add_argument("--variants", action="store_true", help="ResNet-18: bf16, channels-last, ...")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # TF32 off, nadpipe.backend's default
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    rate = matmul_rate(device)
    print(f"device: {name}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"float32 4096^2 matmul, measured now: {rate / 1e12:.2f} TFLOP/s",
          flush=True)  # fmt: skip
    k = args.together or (32 if device.type == "cuda" else 8)
    head = ["model", "samples", "(a) ref/s", "(b) single/s", "(c) 3-seed/s", f"(d) {k} cells/s",
            "(b)/(a)", "(d)/(a)"]  # fmt: skip
    print("\n" + " ".join(f"{h:>14}" for h in head), flush=True)
    rows = []
    for model in args.models:  # each row as it is measured: a run cut short still reports
        small = model == "resnet18" and device.type == "cpu"
        n = args.n or (512 if small else 10240 if device.type == "cpu" else 20480)
        r = bench_model(model, n, args.epochs, device, k if not small else 3)
        rows.append(r)
        rates = [f"{r[key]:.0f}" for key in ("ref", "single", "ensemble3", "together")]
        ratios = [f"{r[key] / r['ref']:.2f}" for key in ("single", "together")]
        print(" ".join(f"{c:>14}" for c in [r["model"], r["n"], *rates, *ratios]), flush=True)
    print("\nthe fraction of the measured float32 matmul rate the training reaches:")
    for r in rows:
        gf, b, d = r["flops"] / 1e9, r["flops"] * r["single"], r["flops"] * r["together"]
        print(f"  {r['model']}: {gf:.3f} GFLOP per sample (forward and backward): "
              f"(b) {b / rate:.3f}, (d) {d / rate:.3f}")  # fmt: skip
    if args.variants and device.type == "cuda":
        bf16 = matmul_rate(device, torch.bfloat16)
        per = next((r["flops"] for r in rows if r["model"] == "resnet18"), None)
        xs, ys = data(128, [0], device)
        per = per or flops_per_sample("resnet18", xs[0], ys[0])
        print(
            f"\nResNet-18, one model; bf16 4096^2 matmul, measured now: {bf16 / 1e12:.0f} TFLOP/s"
        )
        for what, sps in variants(args.n or 20480, device):
            print(f"  {what:32} {sps:9.0f} samples/s, {per * sps / bf16:.3f} of the bf16 rate")
    cold, warm = startup_seconds()
    print(
        f"start-up of a job that does nothing, median of 5: cold (a new Python importing "
        f"nadpipe's job modules) {cold:.2f}s, handed to the warm server {warm:.2f}s"
    )


if __name__ == "__main__":
    main()
