"""NAD estimation speed, measured side by side in one run.

    python benchmarks/nads.py                               # LeNet and ResNet-18 on this device
    python benchmarks/nads.py --models lenet --networks 64

Prints seconds per network for (a) a faithful re-implementation of the NAD paper's reference
method (per network: a new real module, the identity built again, one batch of x0 + h e_k and
one of x0 - h e_k, 1 024 each, with autograd enabled; then PCA of the sensitivities), (b)
nadpipe's `dipole` estimator (probes carried as windows, `nads.windowed`), (b0) the same with
`windowed: false` (every probe through the whole network, one network after another),
(c) the `gradient` estimator (many networks at once, torch.func), and the ratios (a)/(b) and
(a)/(c), all at the same network count (the gradient over more networks for LeNet).
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


def nadpipe_seconds(build, settings: NadSettings, device) -> float:
    start = time.perf_counter()
    g = sample_sensitivities(build, settings, SHAPE, device, progress=False)
    nads_from_sensitivities(g)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lenet", "resnet18"])
    parser.add_argument("--networks", type=int, help="networks per method (default: per model)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {args.threads} threads"
    print(f"device: {name}; torch {torch.__version__}")
    cpu_default = {"lenet": 32, "resnet18": 2}
    print(
        f"{'model':10} {'nets':>6} {'(a) ref s/net':>14} {'(b) dipole':>11} {'(b0) plain':>11}"
        f" {'(c) gradient':>13} {'(a)/(b)':>8} {'(a)/(c)':>8}"
    )
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
        b = nadpipe_seconds(build, NadSettings("dipole", **common), device) / n
        plain = NadSettings("dipole", windowed=False, **common)
        b0 = nadpipe_seconds(build, plain, device) / n
        grad_n = max(n, 1000 if model == "lenet" else n)  # the gradient is cheap: more networks
        grad_chunk = 500 if model == "lenet" else 64
        grad = {**common, "n_networks": grad_n, "networks_per_chunk": grad_chunk}
        grad_settings = NadSettings("gradient", **grad)
        c = nadpipe_seconds(build, grad_settings, device) / grad_n
        print(
            f"{model:10} {n:6d} {a:14.4f} {b:11.4f} {b0:11.4f} {c:13.5f} {a / b:8.2f} {a / c:8.0f}"
        )


if __name__ == "__main__":
    main()
