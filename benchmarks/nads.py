"""NAD estimation speed, measured side by side in one run, against the hardware's own rate.

    python benchmarks/nads.py                               # LeNet and ResNet-18 on this device
    python benchmarks/nads.py --models lenet --networks 32 128

Per method, the marginal cost of one more network: the slope of the sensitivities' time
between two network counts (`--networks N1 N2`), wall time and this process's CPU time side by
side (on a shared machine wall time alone measures the load), and the eigendecomposition timed
apart (a fixed cost: a float64 eigh on the CPU, whatever the device). Methods: (a) a faithful
re-implementation of the NAD paper's reference method (per network: a new real module, the
identity built again, one batch of x0 + h e_k and one of x0 - h e_k, 1 024 each, autograd on),
(b) nadpipe's `dipole` estimator (probes carried as windows, `nads.windowed`) one network after
another (the CPU's default), (g) a chunk's networks as one grouped network (`nads.grouped`, an
accelerator's default), (b2) the same with a chunk of networks in each call (vmap), (b0)
`windowed: false` (every probe through the whole network), (c) the `gradient` estimator (many
networks at once, torch.func). Then the distance to the limit: the FLOPs each method computes
for one network (counted by torch.utils.flop_counter while it runs: the windowed plan computes
fewer than 2d plain forward passes) per marginal second, as a fraction of the rate of a float32
4096 x 4096 matmul measured in the same run (TF32 off: the default, nadpipe.backend).
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from nadpipe.models import build_model
from nadpipe.nads import draw_networks, eval_points, nads_from_sensitivities, sample_sensitivities
from nadpipe.settings import NadSettings, Shape

SHAPE = Shape(1, 32, 32)
D = SHAPE.d


def reference(build, settings: NadSettings, device) -> float:
    """Seconds for the reference method over `settings.n_networks` networks."""
    x0 = eval_points(settings, SHAPE)[0].to(device)
    start = time.perf_counter()
    rows = []
    for k in range(settings.n_networks):
        # as the reference code does per network: a new module, the identity built again, one
        # batch of x0 + h e_k and one of x0 - h e_k (1 024 each), autograd on
        (net,) = draw_networks(build, settings, range(k, k + 1), device)
        eye = torch.eye(D).reshape(D, 1, 32, 32).to(device)
        plus, minus = x0 + settings.step * eye, x0 - settings.step * eye
        f = (net(plus) - net(minus))[:, 0] / (2 * settings.step)
        rows.append(f.detach().double().cpu())
    nads_from_sensitivities(torch.stack(rows))  # the PCA
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of `fn()`, the device's queue drained."""
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    sync(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def sensitivities(build, settings: NadSettings, device, together=False):
    return sample_sensitivities(build, settings, SHAPE, device, progress=False, together=together)


REPEAT = 3  # each count timed this many times, the fastest kept (--repeat)


def marginal(run, counts: tuple[int, int], device) -> tuple[float, float]:
    """(wall, CPU) seconds of one more network: the slope of `run(n)` between the two counts,
    each the fastest of REPEAT runs."""
    (w1, c1), (w2, c2) = (
        min(timed(lambda n=n: run(n), device) for _ in range(REPEAT)) for n in counts
    )
    extra = counts[1] - counts[0]
    return (w2 - w1) / extra, (c2 - c1) / extra


def computed_flops(run) -> float:
    """The FLOPs `run(1)` (one network) computes, counted as it runs."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        run(1)
    return fc.get_total_flops()


def matmul_rate(device) -> float:
    """FLOP/s of the best of five float32 4096 x 4096 matmuls on `device`, measured now."""
    a = torch.randn(4096, 4096, device=device)
    a @ a  # warm-up
    best = float("inf")
    for _ in range(5):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ a
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * 4096**3 / best


def backward(net, device) -> None:
    """One forward and backward pass of one input: the gradient estimator's work a network."""
    x = torch.zeros(1, *SHAPE, device=device, requires_grad=True)
    net(x)[:, 0].sum().backward()


def bench(model: str, n: tuple[int, int], device, gpu: bool, rate: float) -> None:
    """Print one model's rows: each method's marginal cost and its fraction of `rate`."""
    build = partial(build_model, model, 1, 1, {})
    chunk = (16 if gpu else 8) if model == "lenet" else (8 if gpu else 1)
    common = {"batch_size": 1024, "networks_per_chunk": chunk}
    # warm-up: first calls pay for kernel selection and vmap set-up
    sensitivities(build, NadSettings("gradient", n_networks=2), device)
    sensitivities(build, NadSettings("dipole", n_networks=1), device)
    methods = {
        "(b) dipole": lambda k: sensitivities(
            build, NadSettings("dipole", n_networks=k, grouped=False, **common), device
        ),
        "(g) grouped": lambda k: sensitivities(
            build, NadSettings("dipole", n_networks=k, grouped=True, **common), device
        ),
        "(b2) together": lambda k: sensitivities(
            build,
            NadSettings("dipole", n_networks=k, **{**common, "networks_per_chunk": 4}),
            device,
            True,
        ),
        "(b0) plain": lambda k: sensitivities(
            build,
            NadSettings("dipole", n_networks=k, windowed=False, grouped=False, **common),
            device,
        ),
        "(c) gradient": lambda k: sensitivities(
            build,
            NadSettings(
                "gradient",
                n_networks=k,
                batch_size=1024,
                networks_per_chunk=max(n),
            ),
            device,
        ),  # fmt: skip
    }
    reference_n = 1 if model == "resnet18" and not gpu else n[0]
    wall, cpu = timed(
        lambda: reference(build, NadSettings("dipole", n_networks=reference_n), device),
        device,
    )
    flops = 2 * D * computed_flops(lambda k: build().to(device)(torch.zeros(1, *SHAPE).to(device)))
    rows = [("(a) reference", wall / reference_n, cpu / reference_n, flops)]
    for method, run in methods.items():
        w, c = marginal(run, n, device)
        if method.startswith("(c)"):  # torch.func's grad does not run under the flop counter
            f = computed_flops(lambda k: backward(build().to(device), device))
        else:
            f = computed_flops(run)
        rows.append((method, w, c, f))
    for method, w, c, f in rows:
        print(f"{model:9} {method:17} {1e3 * w:12.2f} {1e3 * c:11.2f} {f / 1e9:10.3f} "
              f"{f / w / rate if w > 0 else float('nan'):10.3f}")  # fmt: skip
    g = sensitivities(build, NadSettings("dipole", n_networks=n[1], **common), device)
    w, c = timed(lambda g=g: nads_from_sensitivities(g), device)
    print(f"{model:9} {'eigh (fixed)':17} {'':>12} {'':>11} "
          f"eigh of {n[1]} networks' sensitivities: {w:.2f} s wall, {c:.2f} CPU-s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lenet", "resnet18"])
    parser.add_argument(
        "--networks", type=int, nargs=2, metavar=("N1", "N2"),
        help="the two network counts of the slope (default: per model and device)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs per count, fastest kept")
    args = parser.parse_args()
    global REPEAT
    REPEAT = args.repeat
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device.type == "cuda"
    name = torch.cuda.get_device_name() if gpu else f"CPU, {args.threads} threads"
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # as nadpipe.backend's default
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    rate = matmul_rate(device)
    print(f"device: {name}; torch {torch.__version__}; float32 4096^2 matmul, measured now: "
          f"{rate / 1e12:.2f} TFLOP/s")  # fmt: skip
    counts = {"lenet": (64, 256) if gpu else (16, 32), "resnet18": (8, 32) if gpu else (1, 2)}
    print(f"{'model':9} {'method':17} {'wall ms/net':>12} {'CPU ms/net':>11} "
          f"{'GFLOP/net':>10} {'of matmul':>10}")  # fmt: skip
    for model in args.models:
        n = tuple(args.networks or counts.get(model, (4, 8)))
        bench(model, n, device, gpu, rate)
    print("(the slope between two network counts; (a): the reference's total "
          "over its networks, PCA included)")  # fmt: skip


if __name__ == "__main__":
    main()
