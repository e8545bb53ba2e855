"""A search's table (search.csv) as its contract: what `nadpipe search --resume` may take from
it. Each row names the search it belongs to (`CLAIM`: the architecture, the study and the
reference it was fitted to, by content), its axes are its columns, and its fits are checked
before any of them ranks a protocol."""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING

from .io import differs, file_sha256

if TYPE_CHECKING:  # the tables come from pandas; importing this module loads none
    import pandas as pd

FIT = ("cells", "mean_abs_diff", "max_abs_diff", "pearson")  # reference_* of the summary
CLAIM = ("arch", "study", "reference")
OWN = ("round", "protocol", *FIT, "noise", "learned", "tied", *CLAIM)  # columns of no axis


class TableError(ValueError):
    """The table cannot continue this search; the message says what differs."""


def reference_digest(entry) -> str:
    """The reference a search fits to, by content (16 hex digits): its config entry, its file's
    bytes in place of the file's path, so that the same table copied elsewhere is the same."""
    entry = dict(entry) if isinstance(entry, dict) else {} if entry is None else {"file": entry}
    if isinstance(entry.get("file"), str):
        entry["file"] = file_sha256(entry["file"])
    text = json.dumps(entry, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def claim(config: dict, study: str, arch: str) -> dict:
    """What a search's table claims to be: (arch, study, the digest of its reference)."""
    refs = (config.get(study) or {}).get("references") or {}
    return {"arch": arch, "study": study, "reference": reference_digest(refs.get(arch))}


def check(frame: pd.DataFrame, expected: dict, keys: list[str]) -> list[str]:
    """Refuse (TableError) a table that is not this search's (another architecture, study,
    reference or axes) or whose values cannot be fits; the notes to say (a table written before
    tables named their search)."""
    notes = _check_claim(frame, expected)
    _check_columns(frame, keys)
    _check_values(frame)
    return notes


def _check_claim(frame: pd.DataFrame, expected: dict) -> list[str]:
    present = [k for k in CLAIM if k in frame]
    if not present:
        return [
            "it names no architecture, study or reference (a table of nadpipe 0.14 or older): "
            f"taken as a search of {expected['arch']}'s {expected['study']}"
        ]
    said = {}
    for k in present:
        values = frame[k].dropna().astype(str).unique()
        if len(values) != 1:
            raise TableError(f"its column {k!r} holds {len(values)} values, not one")
        said[k] = values[0]
    differ = differs(said, {k: v for k, v in expected.items() if k in said})
    if differ:
        why = "; ".join(differ)
        fix = (
            " (the reference table or its entry changed since: its fits measure another curve)"
            if any(d.startswith("reference") for d in differ)
            else ""
        )
        raise TableError(f"it is another search's: its {why}{fix}")
    return []


def _check_columns(frame: pd.DataFrame, keys: list[str]) -> None:
    missing = [c for c in ("round", "protocol", *keys, *FIT) if c not in frame]
    other = [c for c in frame.columns if c not in (*OWN, *keys)]
    if missing or other:
        what = (
            f"no column {missing[0]!r}"
            if missing
            else f"the axis key(s) {', '.join(map(str, other))} beyond this search's"
        )
        raise TableError(
            f"{what}: it is no table of a search over {', '.join(keys)} (its columns: "
            f"{', '.join(map(str, frame.columns))}); give the same --axis keys as the search "
            "that wrote it"
        )


def _number(row: dict, key: str) -> float:
    try:
        return float(row[key])
    except (TypeError, ValueError):
        raise TableError(
            f"protocol {row['protocol']!r}: {key} is {row[key]!r}, not a number"
        ) from None


def _count(value) -> float:
    """A whole number's value, NaN where it is text or empty (said as not a count)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _check_values(frame: pd.DataFrame) -> None:
    if frame.empty:
        raise TableError("no protocol in it")
    twice = frame["protocol"][frame["protocol"].duplicated()].unique()
    if len(twice):
        raise TableError(f"protocol {twice[0]!r} appears more than once: the table was edited")
    for row in frame.to_dict("records"):
        _check_row(row)


def _check_row(row: dict) -> None:
    p = row["protocol"]
    r, cells = _count(row["round"]), _count(row["cells"])
    if not (math.isfinite(r) and r == int(r) and r >= 1):
        raise TableError(f"protocol {p!r}: round {row['round']!r}, not a round (1, 2, ...)")
    if not (math.isfinite(cells) and cells == int(cells) and cells >= 0):
        raise TableError(f"protocol {p!r}: cells {row['cells']!r}, not a count of cells")
    for key in ("mean_abs_diff", "max_abs_diff"):
        v = _number(row, key)
        if cells == 0 and math.isnan(v):
            continue  # a protocol without a fit: every cell diverged
        if not (math.isfinite(v) and v >= 0):
            raise TableError(
                f"protocol {p!r}: {key} is {v}, not a |difference| in points (finite, 0 or "
                f"more{'' if cells else ', or empty for a protocol of no cell'})"
            )
    pearson = _number(row, "pearson")
    if not (math.isnan(pearson) or -1 <= pearson <= 1):
        raise TableError(f"protocol {p!r}: pearson is {pearson}, not a correlation")
    if "noise" in row:
        noise = _number(row, "noise")
        if not (math.isnan(noise) or (math.isfinite(noise) and noise >= 0)):
            raise TableError(f"protocol {p!r}: noise is {noise}, not a standard error")
