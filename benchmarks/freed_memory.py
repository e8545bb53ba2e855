"""glibc's malloc with its defaults against `nadpipe.backend.keep_freed_memory` (what every
job's setup calls), side by side in one run: `nadpipe nads --model lenet` in fresh processes,
in turn (the networks, the eigendecomposition and the split-half diagnostics).

    python benchmarks/freed_memory.py                     # 300 networks, each way twice
    python benchmarks/freed_memory.py --networks 100 --rounds 3

Per way: wall seconds, CPU seconds (user + system, the system part apart) and minor page faults
of the command (after `import torch`), the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CODE = """
import json, os, resource, sys, tempfile, time
import torch
from nadpipe import backend, cli
if sys.argv[1] == "default":  # setup() calls it: made to do nothing
    backend.keep_freed_memory = lambda: None
out = os.path.join(tempfile.mkdtemp(), "nads.npy")
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
cli.main(["nads", "--model", "lenet", "--n-networks", sys.argv[2], "--out", out])
r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(json.dumps({"wall": t1 - t0, "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "sys": r1.ru_stime - r0.ru_stime, "faults": r1.ru_minflt - r0.ru_minflt}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    ways = ("default", "kept")
    got: dict[str, list[dict]] = {w: [] for w in ways}
    for _ in range(args.rounds):
        for way in ways:
            out = subprocess.run([sys.executable, "-c", CODE, way, str(args.networks)],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            got[way].append(json.loads(out))
    med = {w: {k: statistics.median(r[k] for r in got[w]) for k in got[w][0]} for w in ways}
    print(f"LeNet NADs, {args.networks} networks, median of {args.rounds} rounds")
    print("| malloc | wall | CPU (system) | page faults |\n| --- | --- | --- | --- |")
    for w in ways:
        m = med[w]
        print(f"| {w} | {m['wall']:.2f} s | {m['cpu']:.2f} s ({m['sys']:.2f}) | "
              f"{m['faults']:,.0f} |")  # fmt: skip
    d, k = med["default"], med["kept"]
    print(f"default / kept: wall {d['wall'] / k['wall']:.2f}, CPU {d['cpu'] / k['cpu']:.2f}")


if __name__ == "__main__":
    main()
