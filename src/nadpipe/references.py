"""Published results beside a study's own: a reference curve (test accuracy per NAD index) or
map (per Fourier frequency) read from a CSV, and how far each protocol's results are from it,
in accuracy points: the mean and largest |difference| and the Pearson correlation over the
cells both have. Used by the aggregate job (the summary states them), the figures and
`nadpipe versus`.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields

import numpy as np
import pandas as pd

from .settings import Reference

KEYS = {"single_direction": ["nad_k"], "fourier": ["freq_a", "freq_b"]}


class ReferenceError(ValueError):
    """A reference file cannot be used; the message names the key and the file."""


def reference_of(raw: dict) -> Reference:
    """The `Reference` of a config's (or a job's) plain entry; other keys (a digest) ignored."""
    return Reference(**{f.name: raw[f.name] for f in fields(Reference) if f.name in raw})


def _percent(values: pd.Series) -> pd.Series:
    """As percent: a table whose values stay within [0, 1] holds fractions."""
    return values * 100 if values.max() <= 1 else values


def read(ref: Reference, study: str, key: str, axis: list[int] | None = None) -> pd.Series:
    """The reference's accuracies in percent, indexed like the study's summary (nad_k, or
    (freq_a, freq_b)). `axis`: the study's frequencies along a and b, for a headerless map.
    `key` (a config key) is named in the errors."""
    if not os.path.isfile(ref.file):
        raise ReferenceError(f"config key {key!r}: no file {ref.file!r}")
    try:
        if ref.column is None:  # a headerless size x size map: rows a, columns b
            grid = np.loadtxt(ref.file, delimiter=",", ndmin=2)
            if axis is None or grid.shape != (len(axis), len(axis)):
                raise ReferenceError(
                    f"config key {key!r}: {ref.file} is a {grid.shape[0]} x {grid.shape[1]} "
                    f"map; the study's grid is {len(axis or [])} x {len(axis or [])}"
                )
            index = pd.MultiIndex.from_product([axis, axis], names=KEYS["fourier"])
            return _percent(pd.Series(grid.ravel(), index=index, name="reference"))
        table = pd.read_csv(ref.file)
    except ReferenceError:
        raise
    except Exception as e:  # noqa: BLE001 -- any reader's error: say which file
        raise ReferenceError(f"config key {key!r}: {ref.file} cannot be read ({e})") from e
    wanted = [ref.column] + ([ref.index] if study == "single_direction" else [ref.a, ref.b])
    missing = [c for c in wanted if c not in table]
    if missing:
        raise ReferenceError(
            f"config key {key!r}: {ref.file} has no column {missing[0]!r} (it has: "
            f"{', '.join(map(str, table.columns))})"
        )
    if study == "single_direction":
        index = pd.Index(table[ref.index].astype(int), name="nad_k")
    else:
        index = pd.MultiIndex.from_arrays(
            [table[ref.a].astype(int) + ref.offset, table[ref.b].astype(int) + ref.offset],
            names=KEYS["fourier"],
        )
    return _percent(pd.Series(table[ref.column].to_numpy(float), index=index, name="reference"))


def ours(df: pd.DataFrame, study: str) -> dict[str, pd.Series]:
    """Per protocol ("" without named ones), the mean test accuracy (%) over seeds of a study's
    rows of one architecture, indexed like `read`'s, with every channel kept."""
    test = df[df["split"] == "test"]
    test = test[test["condition"] == test["condition"].iloc[0]]
    protocols = test["protocol"] if "protocol" in test else pd.Series("", index=test.index)
    return {
        p: part.groupby(KEYS[study])["accuracy"].mean() * 100
        for p, part in test.groupby(protocols, sort=False)
    }


def agreement(mine: pd.Series, ref: pd.Series) -> dict:
    """Over the cells both have: their number, the mean and largest |difference| (points) and
    Pearson's correlation (NaN below 3 cells or without spread)."""
    both = pd.concat([mine.rename("mine"), ref.rename("ref")], axis=1, join="inner").dropna()
    diff = (both["mine"] - both["ref"]).abs()
    r = float("nan")
    if len(both) >= 3 and both["mine"].std() > 0 and both["ref"].std() > 0:
        r = float(np.corrcoef(both["mine"], both["ref"])[0, 1])
    return {
        "cells": len(both),
        "mean_abs_diff": float(diff.mean()) if len(both) else float("nan"),
        "max_abs_diff": float(diff.max()) if len(both) else float("nan"),
        "pearson": r,
    }


def line(name: str, a: dict) -> str:
    """One line of an agreement, as `nadpipe versus` and the logs say it."""
    r = "n/a" if not math.isfinite(a["pearson"]) else f"{a['pearson']:.3f}"
    return (
        f"{name or 'results'}: {a['cells']} cells, mean |difference| {a['mean_abs_diff']:.1f} "
        f"points, largest {a['max_abs_diff']:.1f}, Pearson r {r}"
    )
