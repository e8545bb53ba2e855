"""nadpipe beside other work: LeNet's NADs (`nadpipe nads`) and, with --study, the default
study, on an idle machine and beside 1, 2 and 4 busy PyTorch processes (small matmuls with
torch's default threads, each stopped after --limit seconds), under each way of waiting given.
Prints one table: wall seconds and CPU-seconds of the measured command (its own and its
children's; for the study, its jobs' own), per way and load. Run from the checkout, with
nothing else running:

    .venv/bin/python benchmarks/neighbour.py --networks 200 1100 --busy 0 1 2 4 --study

A way is a set of environment variables for the measured command: "shipped" asks libgomp's own
default explicitly (GOMP_SPINCOUNT=300000: spin, then sleep), which nadpipe leaves alone as a
user's setting; "nadpipe" sets nothing, so nadpipe's own choice applies (nadpipe.threads).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY = """
import time, torch
a = torch.randn(256, 256)
stop = time.time() + {limit}
while time.time() < stop:
    a = (a @ a).tanh()
"""
WAYS = {
    "shipped": {"GOMP_SPINCOUNT": "300000"},
    "nadpipe": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
CHECKOUT = Path(__file__).resolve().parents[1]


def measured(argv: list[str], env: dict, cwd: str) -> tuple[float, float]:
    """(wall s, CPU-s) of one command: the processes it waited for; for a workflow run, its
    jobs' own CPU-seconds as the run recorded them (results/.nadpipe/costs.jsonl), since the
    warm job server's children are not waited for by the command's process."""
    costs = Path(cwd, "results", ".nadpipe", "costs.jsonl")
    seen = len(costs.read_text().splitlines()) if costs.exists() else 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if costs.exists():
        cpu = sum(json.loads(line)["cpu"] for line in costs.read_text().splitlines()[seen:])
    return wall, cpu


def beside(busy: int, limit: float):
    """Start `busy` PyTorch processes that stop by themselves after `limit` seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    code = BUSY.format(limit=limit)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(busy)]
    time.sleep(2 if busy else 0)  # their torch imported, their threads at work
    return procs


def commands(args, scratch: str) -> dict[str, list[str]]:
    bin_ = Path(sys.executable).parent
    out = {
        f"LeNet NADs, {n} networks": [str(bin_ / "nadpipe"), "nads", "--model", "lenet",
                                      "--n-networks", str(n), "--out", f"{scratch}/n.npy", "-q"]
        for n in args.networks
    }  # fmt: skip
    if args.study:
        out["the default study"] = [str(bin_ / "snakemake"), "-s", str(CHECKOUT / "Snakefile"),
                                    "-d", scratch, "--cores", "2", "-F", "-q"]  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--networks", type=int, nargs="*", default=[200])
    p.add_argument("--busy", type=int, nargs="+", default=[0, 2])
    p.add_argument("--ways", nargs="+", default=["shipped", "nadpipe"], choices=list(WAYS))
    p.add_argument("--study", action="store_true", help="the default study too (4 min idle)")
    p.add_argument("--limit", type=float, default=600, help="seconds a busy process lives")
    args = p.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    print(f"# {os.cpu_count()} CPUs; busy: PyTorch processes of 256x256 matmuls")
    print("| command | beside | " + " | ".join(f"{w}: wall s, CPU-s" for w in args.ways) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in args.ways) + " |")
    with tempfile.TemporaryDirectory() as scratch:
        if args.study:
            (Path(scratch) / "config.yaml").write_text((CHECKOUT / "config.yaml").read_text())
        for name, argv in commands(args, scratch).items():
            for busy in args.busy:
                cells = []
                for way in args.ways:
                    procs = beside(busy, args.limit)
                    try:
                        wall, cpu = measured(argv, {**base, **WAYS[way]}, scratch)
                    finally:
                        for proc in procs:
                            proc.kill()
                            proc.wait()
                    cells.append(f"{wall:.1f}, {cpu:.1f}")
                print(f"| {name} | {busy} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
