"""NADs until converged (nads.until_converged) against a fixed number of networks, by real
Snakemake runs (nadpipe.shards):

    python benchmarks/nad_until.py                      # LeNet and the MLP, --cores 2
    python benchmarks/nad_until.py --models lenet --ceiling 4096 --per-shard 256

Per model, in an empty folder: until converged (shards of 64, or --per-shard; rounds doubling
from the first whole shards of at least 22 networks; the
threshold min_overlap_top10 0.5, n_networks the ceiling), then a fixed n_networks equal to the
networks it took (what a user who knew the answer would ask), one after another. Prints the
rounds (networks, split-half top-10 overlap, verdict), the networks it took, the wall and
CPU-seconds of both runs and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nad_shards import run  # noqa: E402  -- one real run, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["lenet", "mlp"])
    parser.add_argument("--ceiling", type=int, default=4096)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--per-shard", type=int, default=64, help="networks per shard")
    args = parser.parse_args()
    cpu_name = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name")), "?")  # fmt: skip
    print(f"--cores {args.cores}, {cpu_name}")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            until = {"n_networks": args.ceiling, "networks_per_shard": args.per_shard,
                     "until_converged": True}  # fmt: skip
            folder = Path(tmp) / f"{model}-until"
            folder.mkdir()
            wall, cpu = run(folder, until, args.cores, "--set-threads", "nad_shard=1", arch=model)
            summary = json.loads((folder / f"results/nads/{model}.json").read_text())
            took = summary["networks"]
            for r in summary["rounds"]:
                print(f"{model}: {r['networks']:>5} networks, top-10 overlap "
                      f"{r['overlap_top10']:.3f}: {r['verdict']}")  # fmt: skip
            folder = Path(tmp) / f"{model}-fixed"
            folder.mkdir()
            fixed_wall, fixed_cpu = run(folder, {"n_networks": took}, args.cores, arch=model)
            print(f"{model}: until converged took {took} networks in {wall:.1f} s wall, "
                  f"{cpu:.1f} CPU-s; fixed n_networks {took}: {fixed_wall:.1f} s, "
                  f"{fixed_cpu:.1f} CPU-s; ratio wall x{wall / fixed_wall:.2f}, "
                  f"CPU x{cpu / fixed_cpu:.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
