"""The default study's wall time against another checkout's, side by side in one run.

    python benchmarks/default_study.py --vs /path/to/other/checkout     # e.g. an older main
    python benchmarks/default_study.py                                  # this checkout alone

Runs `snakemake --cores all` on each checkout's config.yaml, copied into a fresh directory (each
with its own library first on the import path), one after the other, and prints each wall time, the
ratio, and how their results/nad_pairs/summary.parquet compare (the columns both have).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parents[1]
KEY = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]


def run(checkout: Path, cores: str) -> tuple[float, pd.DataFrame]:
    work = Path(tempfile.mkdtemp(prefix="nadpipe-default-"))
    print(f"running {checkout}'s default study in {work}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    # the checkout's config.yaml as the run directory's own: results/, as a user's plain run
    shutil.copy(checkout / "config.yaml", work / "config.yaml")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(checkout / "Snakefile"), "-d", str(work),
           "--cores", cores]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return seconds, pd.read_parquet(work / "results/nad_pairs/summary.parquet")


def compare(a: pd.DataFrame, b: pd.DataFrame) -> str:
    a, b = a.set_index(KEY).sort_index(), b.set_index(KEY).sort_index()
    if not a.index.equals(b.index):
        return "the two summaries have different rows"
    lines = []
    for col in sorted(set(a.columns) & set(b.columns)):
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if x.dtype.kind in "fi" and y.dtype.kind in "fi":
            same = np.array_equal(x.astype(float), y.astype(float), equal_nan=True)
            if not same:
                x, y = x.astype(float), y.astype(float)
                both = np.isfinite(x) & np.isfinite(y)
                differ = both & (x != y)
                diff = np.abs(x[differ] - y[differ]).max() if differ.any() else 0.0
                one = np.isfinite(x) != np.isfinite(y)
                lines.append(
                    f"  {col}: {int(differ.sum())} finite rows differ (max |diff| {diff:.3g}); "
                    f"{int(one.sum())} rows finite in one only (this: {sorted(set(x[one]))[:3]}, "
                    f"other: {sorted(set(y[one]))[:3]})"
                )
        elif not (x == y).all():
            lines.append(f"  {col}: {int((x != y).sum())} rows differ")
    return "identical in every shared column" if not lines else "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vs", type=Path, help="another checkout to time side by side")
    ap.add_argument("--cores", default="all")
    args = ap.parse_args()
    mine, df = run(HERE, args.cores)
    print(f"this checkout ({HERE}): {mine:.1f} s")
    if args.vs:
        other, df_other = run(args.vs.resolve(), args.cores)
        print(f"other checkout ({args.vs}): {other:.1f} s")
        print(f"ratio this / other: {mine / other:.2f}")
        print(f"summary.parquet: {compare(df, df_other)}")


if __name__ == "__main__":
    main()
