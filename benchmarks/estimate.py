"""What a dry run says a run costs, against what the run then takes: the smoke study, the
default study and one three times its size (nine seeds a cell), on this machine as it is and
beside busy PyTorch processes (benchmarks/neighbour.py's: small matmuls, torch's default
threads). Each study runs in a folder of its own, from nothing: its dry run (the models measured
as a first dry run measures them) says its price, a minute after the busy processes started so
that the load average sees them; then the run. Prints one table. Run from the checkout, with
nothing else running:

    .venv/bin/python benchmarks/estimate.py --busy 0 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from neighbour import beside  # noqa: E402 -- the same busy processes as that benchmark

CHECKOUT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [str(Path(sys.executable).parent / "snakemake"), "-s", str(CHECKOUT / "Snakefile")]
LINE = re.compile(
    r"the cost of \S+ here: (\d+) jobs .*?, about (.*?) on \d+ cores? at this machine's load "
    r"now \(([\d.]+) on \d+ cores: its jobs get about ([\d.]+)\); (.*?) of CPU"
)


def studies() -> dict[str, dict]:
    default = yaml.safe_load((CHECKOUT / "config.yaml").read_text())
    triple = json.loads(json.dumps(default))
    triple["nad_pairs"]["seeds"] = list(range(9))  # three times the default's cells
    smoke = yaml.safe_load((CHECKOUT / "configs" / "smoke.yaml").read_text())
    return {"smoke": smoke, "default": default, "default x3": triple}


def seconds(said: str) -> float:
    number, unit = said.split()
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


def measure(config: dict, cores: int, env: dict) -> dict:
    """One study from nothing: its dry run's price, then the run's wall time and its jobs' own
    CPU-seconds (results/.nadpipe/costs.jsonl)."""
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "config.yaml").write_text(yaml.safe_dump(config))
        run = [*SNAKEMAKE, "-d", work, "--cores", str(cores)]
        dry = subprocess.run([*run, "-n"], env=env, capture_output=True, text=True, check=True)
        said = LINE.search(dry.stdout + dry.stderr)
        start = time.perf_counter()
        subprocess.run([*run, "-q"], env=env, capture_output=True, check=True)
        wall = time.perf_counter() - start
        costs = Path(work, "results", ".nadpipe", "costs.jsonl").read_text().splitlines()
        return {
            "jobs": int(said[1]),
            "load": float(said[3]),
            "get": float(said[4]),
            "wall_estimate": seconds(said[2]),
            "wall": wall,
            "cpu_estimate": seconds(said[5]),
            "jobs_cpu": sum(json.loads(line)["cpu"] for line in costs),
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--busy", type=int, nargs="+", default=[0, 2])
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--studies", nargs="+", default=list(studies()), choices=list(studies()))
    p.add_argument("--warm-up", type=float, default=60, help="seconds before the dry run")
    args = p.parse_args()
    env = {**os.environ, "NADPIPE_DRY_RUN_COST": "measure"}
    print(f"# {os.cpu_count()} CPUs, --cores {args.cores}; busy: PyTorch matmul processes")
    print("| study | beside | jobs | load at the dry run | estimate | actual | actual / estimate "
          "| CPU estimate | jobs' own CPU |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.studies:
        for busy in args.busy:
            if not busy:  # quiet: the load of what ran before has decayed
                deadline = time.time() + 300
                while os.getloadavg()[0] > 0.5 and time.time() < deadline:
                    time.sleep(5)
            procs = beside(busy, 3 * 3600)
            try:
                time.sleep(args.warm_up if busy else 0)
                m = measure(studies()[name], args.cores, env)
            finally:
                for proc in procs:
                    proc.kill()
            print(
                f"| {name} | {busy} | {m['jobs']} | {m['load']:.1f} | {m['wall_estimate']:.0f} s "
                f"| {m['wall']:.0f} s | {m['wall'] / m['wall_estimate']:.2f} | "
                f"{m['cpu_estimate']:.0f} s | {m['jobs_cpu']:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
