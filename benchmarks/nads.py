"""NAD estimation speed, measured side by side in one run, against the hardware's own rate.

    python benchmarks/nads.py                               # LeNet and ResNet-18 on this device
    python benchmarks/nads.py --models lenet --networks 64

Prints seconds per network for (a) a faithful re-implementation of the NAD paper's reference
method (per network: a new real module, the identity built again, one batch of x0 + h e_k and
one of x0 - h e_k, 1 024 each, with autograd enabled; then PCA of the sensitivities), (b)
nadpipe's `dipole` estimator (probes carried as windows, `nads.windowed`) one network after
another (the default), (b2) the same with a chunk of networks in each call (vmap: slower on a
CPU and on an H100), (b0) `windowed: false` (every probe through the whole network, one network
after another), (c) the `gradient` estimator (many networks at once, torch.func), and the
ratios (a)/(b) and (a)/(c), all at the same network count (the gradient over more networks for
LeNet). Then the distance to the limit: each method's
arithmetic per network (FLOPs counted by torch.utils.flop_counter: 2d forward passes for the
dipole, one forward and backward for the gradient) as a fraction of the rate of a float32
4096 x 4096 matmul measured in the same run (TF32 off: the default, nadpipe.backend). The
windowed dipole does less arithmetic than the plain one, so its fraction, counted against the
plain dipole's FLOPs, can pass 1.
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


def nadpipe_seconds(build, settings: NadSettings, device, together=None) -> float:
    start = time.perf_counter()
    g = sample_sensitivities(build, settings, SHAPE, device, progress=False, together=together)
    nads_from_sensitivities(g)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


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


def flops_per_network(build) -> tuple[float, float]:
    """(dipole, gradient) FLOPs of one network: 2d forward passes of one input; one forward
    and backward."""
    from torch.utils.flop_counter import FlopCounterMode

    net = build()
    x = torch.randn(1, *SHAPE)
    with FlopCounterMode(display=False) as fc:
        net(x)
    forward = fc.get_total_flops()
    x.requires_grad_(True)
    with FlopCounterMode(display=False) as fc:
        net(x)[:, 0].sum().backward()
    return 2 * D * forward, fc.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lenet", "resnet18"])
    parser.add_argument("--networks", type=int, help="networks per method (default: per model)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {args.threads} threads"
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # as nadpipe.backend's default
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    rate = matmul_rate(device)
    print(f"device: {name}; torch {torch.__version__}; float32 4096^2 matmul, measured now: "
          f"{rate / 1e12:.2f} TFLOP/s")  # fmt: skip
    cpu_default = {"lenet": 32, "resnet18": 2}
    print(
        f"{'model':10} {'nets':>6} {'(a) ref s/net':>14} {'(b) dipole':>11} {'(b2) together':>14}"
        f" {'(b0) plain':>11} {'(c) gradient':>13} {'(a)/(b)':>8} {'(a)/(c)':>8}"
    )
    limits = []
    for model in args.models:
        n = args.networks or (256 if device.type == "cuda" else cpu_default.get(model, 8))
        build = partial(build_model, model, 1, 1, {})
        chunk = 4 if model == "lenet" else 1
        if device.type == "cuda":
            chunk *= 16
        common = {"n_networks": n, "batch_size": 1024, "networks_per_chunk": chunk}
        # warm-up: first calls pay for kernel selection and vmap set-up
        sample_sensitivities(build, NadSettings("gradient", n_networks=2), SHAPE, device, False)
        sample_sensitivities(build, NadSettings("dipole", n_networks=1), SHAPE, device, False)
        a = reference(build, NadSettings("dipole", **common), device) / n
        b = nadpipe_seconds(build, NadSettings("dipole", **common), device, False) / n
        together = {**common, "networks_per_chunk": max(chunk, 4)}
        b2 = nadpipe_seconds(build, NadSettings("dipole", **together), device, True) / n
        plain = NadSettings("dipole", windowed=False, **common)
        b0 = nadpipe_seconds(build, plain, device) / n
        grad_n = max(n, 1000 if model == "lenet" else n)  # the gradient is cheap: more networks
        grad_chunk = 500 if model == "lenet" else 64
        grad = {**common, "n_networks": grad_n, "networks_per_chunk": grad_chunk}
        grad_settings = NadSettings("gradient", **grad)
        c = nadpipe_seconds(build, grad_settings, device) / grad_n
        print(
            f"{model:10} {n:6d} {a:14.4f} {b:11.4f} {b2:14.4f} {b0:11.4f} {c:13.5f} "
            f"{a / b:8.2f} {a / c:8.0f}"
        )
        dipole, gradient = flops_per_network(build)
        limits.append((model, dipole, gradient, {"(a)": a, "(b)": b, "(b2)": b2, "(b0)": b0},
                       c))  # fmt: skip
    print("\nthe fraction of the measured matmul rate each method's arithmetic runs at:")
    for model, dipole, gradient, dipoles, c in limits:
        parts = ", ".join(f"{k} {dipole / t / rate:.3f}" for k, t in dipoles.items())
        grad = f"(c) {gradient / c / rate:.3f}"
        print(f"  {model}: dipole {dipole / 1e9:.2f} GFLOP/network: {parts}; "
              f"gradient {gradient / 1e6:.1f} MFLOP/network: {grad}")  # fmt: skip


if __name__ == "__main__":
    main()
