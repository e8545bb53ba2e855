"""Regenerate the README's figure and the numbers it quotes from the default study.

    python3 docs/regenerate_readme.py [--keep DIR]

Runs `snakemake --cores all` on config.yaml in a fresh directory (the default study from
scratch, as a new user runs it), copies its LeNet reliance figure to
docs/images/reliance_lenet.png, and prints the wall time, the CPU, and what the results show
(the end of run's and the report's first page's sentences, nadpipe.findings), to be quoted in
the README's "What it shows". Nothing else is written into the checkout.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", help="run in this directory and keep it (default: a temporary one)")
    args = p.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="nadpipe-readme-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "config.yaml", work / "config.yaml")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "all"]
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        print((res.stdout + res.stderr)[-4000:], file=sys.stderr)
        return 1
    shutil.copy(work / "results/nad_pairs/plots/reliance_lenet.png",
                REPO / "docs/images/reliance_lenet.png")  # fmt: skip
    out = res.stdout + res.stderr
    found = out.split("What the results show:")[1].split("The report")[0]
    print(f"default study: {seconds / 60:.1f} minutes on {cpu_name()}, {_cores()} cores")
    print("What the results show:" + found.rstrip())
    print("The README's table of one run's verdicts:")
    print(table(work / "results/nad_pairs/summary.parquet"))
    print(f"wrote {REPO / 'docs/images/reliance_lenet.png'} (from {work})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def table(summary: Path) -> str:
    """The README's table: per cell with i != j, LeNet's and the MLP's verdict in the words of
    nadpipe.findings, with the seeds' reliance angles (or test accuracy, where not learned)."""
    import pandas as pd

    from nadpipe.findings import VERDICTS, cell_verdicts

    df = pd.read_parquet(summary)
    both = df[(df["split"] == "test") & (df["condition"] == "both")]

    def said(v) -> str:
        if v.verdict == "not learned":
            acc = both[(both.arch == v.arch) & (both.nad_i == v.nad_i) & (both.nad_j == v.nad_j)]
            lo, hi = 100 * acc["accuracy"].min(), 100 * acc["accuracy"].max()
            return f"not learned, test accuracy {lo:.1f}–{hi:.1f} %"
        lo, hi = f"{v.reliance_min:.1f}", f"{v.reliance_max:.1f}"
        return f"{VERDICTS[v.verdict]}, {lo if lo == hi else f'{lo}–{hi}'}°"

    cells = {a: cell_verdicts(df[df["arch"] == a]) for a in ("lenet", "mlp")}
    rows = ["| cell (i, j) | LeNet | MLP |", "| --- | --- | --- |"]
    for le, ml in zip(*(c.itertuples() for c in cells.values()), strict=True):
        if le.nad_i != le.nad_j:
            rows.append(f"| ({le.nad_i}, {le.nad_j}) | {said(le)} | {said(ml)} |")
    return "\n".join(rows)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
