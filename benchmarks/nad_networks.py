"""Construction of the NADs' random networks, per network, measured side by side in one run.

    python benchmarks/nad_networks.py                         # ResNet-18, VGG-11, DenseNet-121
    python benchmarks/nad_networks.py --device cuda --networks 50

Prints, per model, the median seconds per network of (a) building it on the CPU and copying it
to the device tensor by tensor (b879b52's path) and (b) `nadpipe.nads.draw_networks`, which
builds it on the device (nadpipe.backend.born_on), with the ratio (a)/(b); and how many tensors
(a) copies per network. On the CPU (a) and (b) do the same work: the figure to compare with is
the GPU's, where (b) makes and initialises the parameters there.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch

from nadpipe.models import build
from nadpipe.nads import draw_networks
from nadpipe.settings import ModelSpec, NadSettings, Shape


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def per_network(fn, device, n: int) -> float:
    times = []
    for k in range(n):
        sync(device)
        start = time.perf_counter()
        fn(k)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "vgg11", "densenet121"])
    ap.add_argument("--networks", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    settings = NadSettings()
    print(f"device {device}, {args.threads} thread(s), median of {args.networks} networks")
    for model in args.models:
        spec = ModelSpec(model, {}, Shape(3, 32, 32), 1)
        make = partial(build, spec)
        tensors = len(make().state_dict())

        def copied(k, make=make):  # b879b52: built on the CPU, then .to(device)
            torch.manual_seed(k)
            return make().eval().to(device)

        def born(k, make=make):
            return draw_networks(make, settings, range(k, k + 1), device)

        copied(0), born(0)  # warm-up
        a = per_network(copied, device, args.networks)
        b = per_network(born, device, args.networks)
        print(f"{model}: (a) CPU then copy {a * 1e3:.1f} ms/net ({tensors} tensors copied), "
              f"(b) born on {device.type} {b * 1e3:.1f} ms/net, (a)/(b) {a / b:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
