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
from .studies import REGISTRY


def keys(study: str) -> list[str]:
    """The columns a published table of `study` is keyed by (Study.reference_keys)."""

    return list(REGISTRY[study].reference_keys)


def comparable() -> list[str]:
    """The studies whose results can be compared with a published table."""

    return [name for name, entry in REGISTRY.items() if entry.reference_keys]


CHANCE = 50.0  # percent: both studies are binary; a curve entirely below it is no accuracy


class ReferenceError(ValueError):
    """A reference file cannot be used; the message names the key and the file."""


def reference_of(raw: dict) -> Reference:
    """The `Reference` of a config's (or a job's) plain entry; other keys (a digest) ignored."""
    return Reference(**{f.name: raw[f.name] for f in fields(Reference) if f.name in raw})


def _line(table: pd.DataFrame, row) -> int:
    """The file's line of a table row (the header is line 1)."""
    return int(table.index.get_loc(row)) + 2


def _whole(table: pd.DataFrame, column: str, where: str) -> pd.Series:
    """A column of NAD indices or frequencies: every cell a whole number."""
    values = pd.to_numeric(table[column], errors="coerce")
    for row, raw in table[column][values.isna()].items():
        what = "is empty" if pd.isna(raw) else f"holds {raw!r}, not a number"
        raise ReferenceError(f"{where}, line {_line(table, row)}, column {column!r} {what}")
    fractional = values[values != values.round()]
    if len(fractional):
        row = fractional.index[0]
        raise ReferenceError(
            f"{where}, line {_line(table, row)}, column {column!r}: {fractional.iloc[0]} is not "
            "a whole number (indices and frequencies are integers)"
        )
    return values.astype(int)


def _accuracies(values: np.ndarray, where: str, lines: list[int], column: str) -> np.ndarray:
    """Accuracies in percent: every cell a number within [0, 100]; a table whose values all
    stay within [0, 1] holds fractions (they are multiplied by 100)."""
    bad = ~np.isfinite(values) | (values < 0) | (values > 100)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "is empty" if np.isnan(values[i]) else f"holds {values[i]:g}"
        raise ReferenceError(
            f"{where}, line {lines[i]}, column {column!r} {what}: accuracies are numbers "
            "within [0, 1] (fractions) or [0, 100] (percent)"
        )
    if values.max() > 1 and (values <= 1).any():  # 0.55 beside 62: a fraction among percents
        i = int(np.flatnonzero(values <= 1)[0])
        raise ReferenceError(
            f"{where}, line {lines[i]}, column {column!r} holds {values[i]:g} while others are "
            f"percents (up to {values.max():g}): the column mixes fractions and percents; write "
            "all in one (62 or 0.62)"
        )
    percent = values * 100 if values.max() <= 1 else values
    if percent.max() < CHANCE:
        raise ReferenceError(
            f"{where}, column {column!r}: no value reaches chance ({CHANCE:g} % for these "
            f"binary studies; the largest is {percent.max():.3g} %): is it an accuracy column?"
        )
    return percent


def _unused(ref: Reference, study: str, key: str) -> None:
    """Refuse a setting that the study (or a headerless map) would ignore."""
    default = Reference()
    two = len(keys(study)) == 2
    unused = [] if two else ["a", "b", "offset", "scale"]
    unused += ["index"] if two or ref.column is None else []
    unused += ["a", "b", "offset", "scale"] if ref.column is None else []
    for name in dict.fromkeys(unused):
        if getattr(ref, name) != getattr(default, name):
            what = "a headerless map" if ref.column is None else f"a {study} reference"
            raise ReferenceError(
                f"config key {key!r}: {name!r} does not apply to {what} (it sets only "
                f"{', '.join(f.name for f in fields(Reference) if f.name not in unused)})"
            )


def read(ref: Reference, study: str, key: str, axis: list[int] | None = None) -> pd.Series:
    """The reference's accuracies in percent, indexed like the study's summary (nad_k, or
    (freq_a, freq_b)). `axis`: the study's frequencies along a and b, for a headerless map.
    `key` (a config key) is named in the errors, with the file and, for a faulty cell, its
    line and column: text, an empty cell, a fractional index, a repeated index, an accuracy
    outside [0, 100], a file without rows and a setting the study ignores are refused."""
    _unused(ref, study, key)
    if not os.path.isfile(ref.file):
        raise ReferenceError(f"config key {key!r}: no file {ref.file!r}")
    where = f"config key {key!r}: {ref.file}"
    try:
        if ref.column is None:  # a headerless size x size map: rows a, columns b
            grid = np.loadtxt(ref.file, delimiter=",", ndmin=2)
            if axis is None or grid.shape != (len(axis), len(axis)):
                raise ReferenceError(
                    f"{where} is a {grid.shape[0]} x {grid.shape[1]} "
                    f"map; the study's grid is {len(axis or [])} x {len(axis or [])}"
                )
            index = pd.MultiIndex.from_product([axis, axis], names=keys(study))
            lines = [1 + i // len(axis) for i in range(grid.size)]
            values = _accuracies(grid.ravel(), where, lines, "(map)")
            return pd.Series(values, index=index, name="reference")
        table = pd.read_csv(ref.file, keep_default_na=False, na_values=[""])  # "n/a": text
    except ReferenceError:
        raise
    except Exception as e:  # noqa: BLE001 -- any reader's error: say which file
        raise ReferenceError(f"{where} cannot be read ({e})") from e
    columns = [ref.index] if len(keys(study)) == 1 else [ref.a, ref.b]
    missing = [c for c in [ref.column, *columns] if c not in table]
    if missing:
        header = ", ".join(map(str, table.columns))
        if all(_number(c) for c in table.columns):
            raise ReferenceError(
                f"{where} has no header line: its first line holds numbers ({header}), not "
                f"column names; add one naming the columns ({', '.join(columns)} and the "
                "accuracy's), or, for a map of accuracies alone, give no column"
            )
        raise ReferenceError(
            f"{where} has no column {missing[0]!r} (it has: {header}); name the columns it "
            "has (the reference's column, index, a and b)"
        )
    if table.empty:
        raise ReferenceError(f"{where} has no rows")
    values = [_whole(table, c, where) for c in columns]
    if len(columns) == 2:  # the table's map coordinates as frequencies, in cycles per image
        values = [(v + ref.offset) * ref.scale for v in values]
    index = pd.MultiIndex.from_arrays(values, names=keys(study))
    if len(columns) == 1:
        index = index.get_level_values(0)
    repeated = index.duplicated(keep=False)
    if repeated.any():
        first, *others = [_line(table, r) for r in table.index[repeated]]
        value = index[repeated][0]
        raise ReferenceError(
            f"{where}, lines {first} and {others[0]}: the index {value} appears twice "
            f"(column{'s' if len(columns) == 2 else ''} {', '.join(map(repr, columns))})"
        )
    numbers = pd.to_numeric(table[ref.column], errors="coerce")
    for row, raw in table[ref.column][numbers.isna() & table[ref.column].notna()].items():
        raise ReferenceError(
            f"{where}, line {_line(table, row)}, column {ref.column!r} holds {raw!r}, not a number"
        )
    lines = [_line(table, r) for r in table.index]
    values = _accuracies(numbers.to_numpy(float), where, lines, ref.column)
    return pd.Series(values, index=index, name="reference")


def _number(text) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _as_tuples(keys) -> list[tuple]:
    return [k if isinstance(k, tuple) else (k,) for k in keys]


def in_common(ref: pd.Series, cells, where: str) -> None:
    """Refuse a reference that has no cell of the study's (`cells`: its keys, one value or a
    tuple each, as an index holds them)."""
    cells = _as_tuples(cells)
    if not set(_as_tuples(ref.index)) & set(cells):
        shown = ", ".join(str(c[0] if len(c) == 1 else c) for c in list(cells)[:6])
        theirs = ", ".join(str(k) for k in list(ref.index)[:6])
        raise ReferenceError(
            f"{where}: no cell in common with the study (it has {shown}"
            f"{', ...' if len(cells) > 6 else ''}; the reference {theirs}"
            f"{', ...' if len(ref) > 6 else ''})"
        )


def ours(df: pd.DataFrame, study: str) -> dict[str, pd.Series]:
    """Per protocol ("" without named ones: the column is null), the mean test accuracy (%) over
    seeds of a study's rows of one architecture, indexed like `read`'s, with every channel kept."""
    test = df[df["split"] == "test"]
    test = test[test["condition"] == test["condition"].iloc[0]]
    protocols = test["protocol"].fillna("")
    return {
        p: part.groupby(keys(study))["accuracy"].mean() * 100
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
