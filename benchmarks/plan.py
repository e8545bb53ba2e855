"""What planning a grid costs: `snakemake -n` of NAD-pair grids of about 1 000, 10 000 and 50 000
jobs, and the plan of one job as a SLURM job's own Snakemake makes it (it parses the workflow
again and builds the DAG of its target), in CPU-seconds and peak memory of the Snakemake process.

    python benchmarks/plan.py                    # about 1 000, 10 000 and 50 000 jobs
    python benchmarks/plan.py --jobs 1000 10000  # fewer sizes

Each grid is LeNet's NAD pairs (i, j) over n indices, one seed: per cell a training, its ahead
file (nadpipe.batching) and an evaluation, so 3 n^2 jobs plus the NADs and the summary's few. It
runs in an empty folder with nothing trained, so every job is planned; the NADs are not
computed (a dry run). Prints per grid: jobs, seconds of wall, CPU-seconds, peak RSS, and per job;
the ratios between sizes say whether planning grows faster than the job count.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def config(indices: int) -> dict:
    return {
        "architectures": {"lenet": {}},
        "nads": {"n_networks": 10000},  # rank 9 999: every index below it is a NAD
        "nad_pairs": {"architectures": ["lenet"], "indices": list(range(indices)), "seeds": [0]},
    }


# Snakemake's command line in this process, which says its own CPU time and peak memory as it
# exits (Snakemake ends with sys.exit: atexit handlers run)
MEASURED = """
import atexit, resource, sys
def said():
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(f"MEASURED {r.ru_utime + r.ru_stime} {r.ru_maxrss}", file=sys.stderr, flush=True)
atexit.register(said)
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


def snakemake(folder: Path, *args: str) -> tuple[float, float, int, str]:
    """Wall seconds, CPU-seconds and peak RSS (MiB) of one Snakemake process, and its output."""
    start = time.perf_counter()
    cmd = [sys.executable, "-c", MEASURED, "-s", str(REPO / "Snakefile"), "-d", str(folder),
           "--cores", "1", *args]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = res.stdout + res.stderr
    found = re.search(r"^MEASURED (\S+) (\d+)$", res.stderr, re.M)
    if res.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(cmd[3:])} failed:\n{out[-3000:]}")
    return wall, float(found[1]), int(found[2]) // 1024, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 50000])
    args = parser.parse_args()
    rows = []
    for target in sorted(args.jobs):
        n = max(2, round(math.sqrt(target / 3)))
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "config.yaml").write_text(yaml.safe_dump(config(n)))
            wall, cpu, rss, out = snakemake(folder, "-n")
            jobs = int(re.search(r"^total\s+(\d+)$", out, re.M)[1])
            one = f"results/nad_pairs/eval/lenet/i0_j{n - 1}_s0.parquet"
            wall1, cpu1, rss1, _ = snakemake(folder, "-n", one)
        rows.append((jobs, n, wall, cpu, rss, wall1, cpu1, rss1))
        print(f"{jobs:>6} jobs ({n} indices): snakemake -n {wall:6.1f} s wall, {cpu:6.1f} "
              f"CPU-s, {rss:5d} MiB peak, {1000 * cpu / jobs:5.2f} CPU-ms/job; one job's plan "
              f"{wall1:5.1f} s wall, {cpu1:5.1f} CPU-s, {rss1:5d} MiB", flush=True)  # fmt: skip
    for (j0, _, _, c0, m0, _, o0, _), (j1, _, _, c1, m1, _, o1, _) in itertools.pairwise(rows):
        print(f"{j0} -> {j1} jobs (x{j1 / j0:.1f}): snakemake -n CPU x{c1 / c0:.1f}, memory "
              f"x{m1 / m0:.1f}; one job's plan CPU x{o1 / o0:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
