"""Training throughput on the NAD-pair data, measured side by side in one run.

    python benchmarks/train.py                      # MLP, LeNet, ResNet-18 on the current device
    python benchmarks/train.py --models lenet --n 8192 --epochs 2

Prints samples/s for (a) a reference loop in the style of the NAD paper's code (a torch Dataset
indexed per sample through a DataLoader with 2 workers, one model, .item() every batch), (b)
nadpipe's single-model loop and (c) nadpipe's 3-seed ensemble (3 models' samples per second), the
ratios to (a), ResNet-18's achieved FLOP rate against a reference (a GPU's dense fp32 peak; on a
CPU the rate of a large fp32 matmul measured in the same run, which convolutions can exceed), and
the start-up cost of one pipeline job, cold and handed to the warm server (nadpipe.worker).
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

# dense peak FLOP/s by device name (fp32 without tensor cores; bf16 dense tensor cores)
GPU_PEAKS = {"H100": {"fp32": 67e12, "bf16": 989e12}, "H200": {"fp32": 67e12, "bf16": 989e12}}


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


def peak_flops(device) -> tuple[float, str]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name()
        for key, peaks in GPU_PEAKS.items():
            if key in name:
                return peaks["fp32"], f"the {name} fp32 dense peak"
        return float("nan"), f"{name}: peak unknown"
    a = torch.randn(4096, 4096)
    a @ a  # warm-up
    t = min(timed(lambda: a @ a, device) for _ in range(5))
    return 2 * 4096**3 / t, "the best fp32 4096^2 matmul on this CPU, measured now (not its peak)"


def startup_seconds() -> tuple[float, float]:
    """Median seconds of 5 starts of a job that does nothing: cold (a new Python importing the
    job modules, as a job without the warm server) and warm (a job handed to a server of
    nadpipe.worker, as the workflow's jobs on one machine)."""
    job = "from nadpipe import worker; worker.run('nadpipe.io:derive_seed', 'x')"
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
from nadpipe import worker
proc = worker.start("/tmp/nadpipe-bench-{pid}")
while os.path.exists(os.environ[worker.ENV].rsplit(":", 1)[0] + ".starting"):
    time.sleep(0.05)
for _ in range(5):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "{job}"], check=True)
    print(time.perf_counter() - start)
proc.terminate()
""".replace("{pid}", str(os.getpid()))


def bench_model(model: str, n: int, epochs: int, device: torch.device) -> dict:
    """Samples/s of (a) the reference loop, (b) the single-model loop, (c) a 3-seed ensemble."""
    seeds = [0, 1, 2]
    xs, ys = data(n, seeds, device)
    s = TrainSettings(epochs=epochs, batch_size=128)
    x_cpu, y_cpu = xs[0].cpu(), ys[0].cpu()

    def ref():
        reference_loop(fresh(model, 0, device), x_cpu, y_cpu, s, device)

    def single():
        train_one(fresh(model, 0, device), xs[0], ys[0], s, 0)

    def ensemble():
        train([fresh(model, k, device) for k in seeds], xs, ys, s, seeds, progress=False)

    samples = n * epochs
    row = {
        "model": model,
        "n": n,
        "ref": samples / timed(ref, device),
        "single": samples / timed(single, device),
        "ensemble3": 3 * samples / timed(ensemble, device),
    }
    if model == "resnet18":
        with FlopCounterMode(display=False) as fc:
            F.cross_entropy(fresh(model, 0, device)(xs[0, :128]), ys[0, :128]).backward()
        per_sample = fc.get_total_flops() / 128  # forward + backward
        peak, what = peak_flops(device)
        row["flop_fraction"] = per_sample * row["single"] / peak
        row["peak_note"] = (
            f"{per_sample / 1e9:.2f} GFLOP per sample, {per_sample * row['single'] / 1e9:.0f} "
            f"GFLOP/s; the reference, {what}: {peak / 1e9:.0f} GFLOP/s"
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "lenet", "resnet18"])
    ap.add_argument("--n", type=int, default=None, help="samples per epoch (default by device)")
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    rows = []
    for model in args.models:
        small = model == "resnet18" and device.type == "cpu"
        n = args.n or (512 if small else 10240 if device.type == "cpu" else 20480)
        rows.append(bench_model(model, n, args.epochs, device))
    head = ["model", "samples", "(a) ref/s", "(b) single/s", "(c) 3-seed/s", "(b)/(a)", "(c)/(a)"]
    print("\n" + " ".join(f"{h:>13}" for h in head))
    for r in rows:
        rates = [f"{r[k]:.0f}" for k in ("ref", "single", "ensemble3")]
        ratios = [f"{r[k] / r['ref']:.2f}" for k in ("single", "ensemble3")]
        cells = [r["model"], r["n"], *rates, *ratios]
        print(" ".join(f"{c:>13}" for c in cells))
    for r in rows:
        if "flop_fraction" in r:
            share = f"{100 * r['flop_fraction']:.1f}% of the reference"
            print(f"\n{r['model']} (b): {share} ({r['peak_note']})")
    cold, warm = startup_seconds()
    print(
        f"start-up of a job that does nothing, median of 5: cold (a new Python importing "
        f"nadpipe's job modules) {cold:.2f}s, handed to the warm server {warm:.2f}s"
    )


if __name__ == "__main__":
    main()
