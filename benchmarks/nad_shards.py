"""NADs in shards against one job, by real Snakemake runs of LeNet's NADs (nadpipe.shards):

    python benchmarks/nad_shards.py              # 2 200 networks, --cores 2
    python benchmarks/nad_shards.py --networks 440 --cores 2

Side by side in one run, each in an empty folder:
- one job: all networks in the NAD job (threads: as many as --cores gives it);
- 4 shards: networks_per_shard the quarter rounded up to a multiple of 64, each shard one
  thread, so that --cores shards run at once (and the merge);
- raised: half the networks in shards of 256, then n_networks raised to all of them: the
  second run computes only the new shards (and the last, partial one again).
Prints wall seconds and CPU-seconds (of every process the run started) per run, the ratios,
and checks that every sharded result equals the one job's NADs bit for bit.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
TARGET = "results/nads/lenet.pt"


def run(
    folder: Path, nads: dict, cores: int, *extra: str, arch: str = "lenet"
) -> tuple[float, float]:
    """(wall s, CPU s) of one real run of `arch`'s NAD job in `folder` with the `nads`
    settings."""
    config = {"architectures": {arch: {}}, "nads": nads,
              "nad_pairs": {"architectures": [arch], "indices": [0], "seeds": [0]}}  # fmt: skip
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(folder),
           "--cores", str(cores), f"results/nads/{arch}.pt", *extra]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", type=int, default=2200)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    n, cores = args.networks, args.cores
    quarter = -(-n // 4 // 64) * 64 or 64
    rows, arts = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, nads, steps in (
            ("one job", {"n_networks": n}, [()]),
            (f"4 shards of {quarter}", {"n_networks": n, "networks_per_shard": quarter},
             [("--set-threads", "nad_shard=1")]),
            (f"{n // 2} raised to {n} (shards of 256)", {"n_networks": n // 2,
             "networks_per_shard": 256}, [("--set-threads", "nad_shard=1")] * 2),
        ):  # fmt: skip
            folder = Path(tmp) / str(len(rows))
            folder.mkdir()
            for k, extra in enumerate(steps):
                settings = {**nads, "n_networks": n} if k == len(steps) - 1 else nads
                wall, cpu = run(folder, settings, cores, *extra)
                label = name if len(steps) == 1 else f"{name}: run {k + 1}"
                rows.append((label, wall, cpu))
                print(f"{label:<44} {wall:7.1f} s wall {cpu:8.1f} CPU-s", flush=True)
            arts[name] = torch.load(folder / TARGET, weights_only=True)
    cpu_name = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name")), "?")  # fmt: skip
    base = rows[0]
    print(f"\nLeNet, {n} networks, --cores {cores}, {cpu_name}")
    for label, wall, cpu in rows[1:]:
        print(f"{label:<44} wall x{wall / base[1]:.2f}, CPU x{cpu / base[2]:.2f} of one job")
    first = arts.pop("one job")
    for name, art in arts.items():
        same = torch.equal(art["vectors"], first["vectors"]) and torch.equal(
            art["eigenvalues"], first["eigenvalues"]
        )
        print(f"{name}: NADs {'equal' if same else 'DIFFER FROM'} the one job's, bit for bit")


if __name__ == "__main__":
    main()
