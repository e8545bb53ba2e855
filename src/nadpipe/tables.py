"""A study's tables: summary.parquet, every row of its models' evaluations sorted by key, and
runs.parquet, each model's timings and where it ran (the aggregate job). Torch-free to import:
the job, one of a cluster's small ones, starts without torch."""

from __future__ import annotations

from functools import partial

import pandas as pd

from . import row
from .findings import NOT_FIT, outcomes
from .io import atomic_write, load_parquet
from .log import say, warn
from .studies import REGISTRY


def _with_references(df: pd.DataFrame, references: dict, axis: list[int] | None) -> pd.DataFrame:
    # deferred: it loads numpy, which importing tables does not
    from . import references as refs

    study = df["study"].iloc[0]
    keys = refs.keys(study)
    published, stats = [], []
    for arch, raw in sorted(references.items()):
        ref = refs.read(refs.reference_of(raw), study, f"{study}.references.{arch}", axis)
        # a fraction, as `accuracy` beside it (published tables are in percent)
        published.append((ref / 100).rename("reference_accuracy").reset_index().assign(arch=arch))
        for protocol, mine in refs.ours(df[df["arch"] == arch], study).items():
            a = refs.agreement(mine, ref)
            stats.append(
                {
                    "arch": arch,
                    "protocol": protocol or None,
                    **{f"reference_{k}": v for k, v in a.items()},
                }
            )
            say(f"{arch} against {raw['file']}: {refs.line(protocol, a)}")
    df = df.merge(pd.concat(published), on=["arch", *keys], how="left")
    return df.merge(pd.DataFrame(stats), on=["arch", "protocol"], how="left")


def aggregate_job(
    evaluations: list[str],
    summary: str,
    runs: str,
    references: dict | None = None,
    axis: list[int] | None = None,
) -> str:
    """Concatenate the rows of every model of a study, sorted by their key; each model's
    timings and where it ran go to `runs`, one row per model. With `references` (architecture
    -> a published table, nadpipe.references; `axis`: the study's frequencies, for a map),
    each row carries its cell's published accuracy and its protocol's agreement with it."""
    df = pd.concat([load_parquet(p) for p in evaluations], ignore_index=True)
    if "outcome" in df:  # an evaluation an earlier version wrote says it in its words
        df["outcome"] = outcomes(df["outcome"])
    if references:
        df = _with_references(df, references, axis)
    key = ["study", "arch", "variant", "seed"]
    variant = list(REGISTRY[df["study"].iloc[0]].variant.COLUMNS)  # the variant's key columns
    df = df.sort_values(row.sort_columns(variant), kind="stable")
    timing = [c for c in row.names(row.RUN) if c in df]
    per_model = df[key + timing].drop_duplicates(key).reset_index(drop=True)
    df = df.drop(columns=timing).reset_index(drop=True)
    atomic_write(summary, partial(df.to_parquet, index=False))
    atomic_write(runs, partial(per_model.to_parquet, index=False))
    if df["diverged"].any():
        n = int(df.drop_duplicates(key)["diverged"].sum())
        warn(f"{n} training(s) of {df['study'].iloc[0]} diverged: their rows are NaN ({summary})")
    dead = df.drop_duplicates(key)
    dead = dead[dead["outcome"] == NOT_FIT] if "outcome" in dead else dead.iloc[:0]
    if len(dead):
        cells = ", ".join(f"{a} {v} s{s}" for a, v, s in dead[["arch", "variant", "seed"]].values)
        warn(
            f"{len(dead)} model(s) of {df['study'].iloc[0]} did not fit their training set "
            f"(training accuracy not above guessing): {cells}; their accuracies stand, their "
            f"other measures are NaN and their cells are marked '{NOT_FIT}' in the figures "
            f"({summary})"
        )
    return f"{len(df)} rows from {len(evaluations)} models -> {summary}; timings -> {runs}"
