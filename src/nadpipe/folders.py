"""Every results folder under a directory, side by side (`nadpipe runs`): what their configs set
differently, their studies, architectures and cells, what each found (the studies' findings,
the lines a run ends with), and when and at which version it was made. Reads each folder's
resolved config (config.yaml) and its summaries; computes nothing."""

from __future__ import annotations

import contextlib
import datetime
from pathlib import Path
from typing import Any

import yaml

from . import cost
from .io import ArtifactError, load_parquet
from .studies import REGISTRY, load_modules
from .usage import clock


def folders(root: str | Path) -> list[Path]:
    """The results folders directly under `root`: those with a resolved config.yaml and a
    study's summary.parquet."""
    root = Path(root)
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and (p / "config.yaml").is_file() and any(p.glob("*/summary.parquet"))
    )


def flat(config: Any, prefix: str = "") -> dict[str, Any]:
    """A config as dotted keys (nads.n_networks: 300)."""
    if not isinstance(config, dict):
        return {prefix: config}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(flat(value, f"{prefix}{key}."))
    return {k.rstrip("."): v for k, v in out.items()}


def _off(config: dict[str, Any]) -> set[str]:
    """The studies a dotted config leaves off (their `enabled` false)."""
    return {
        k.removesuffix(".enabled") for k, v in config.items() if k.endswith(".enabled") and not v
    }


def relevant(config: dict[str, Any]) -> dict[str, Any]:
    """A dotted config without the keys of the studies it leaves off (their `enabled` stays):
    what a disabled study would have done sets nothing of a run."""
    off = _off(config)
    return {k: v for k, v in config.items() if k.split(".")[0] not in off or k.endswith(".enabled")}


class FolderError(ValueError):
    """A results folder's file that cannot be read as nadpipe wrote it; the message names it."""


SUMMARY_KEYS = ("study", "arch", "variant", "seed")  # what every study's summary has


def _config(folder: Path) -> dict:
    """A folder's resolved config, checked to be one."""
    path = folder / "config.yaml"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FolderError(f"{path} cannot be read as a config ({why})") from None
    if config is not None and not isinstance(config, dict):
        raise FolderError(f"{path} holds a {type(config).__name__}, not a config's keys")
    return config or {}


def _summary(path: Path):  # -> pandas.DataFrame
    """A study's summary, checked to hold rows of a study's cells."""
    try:
        df = load_parquet(path)
    except ArtifactError as e:
        raise FolderError(str(e)) from None
    if df.empty:
        raise FolderError(f"{path} has no rows: its study made no cell")
    missing = [k for k in SUMMARY_KEYS if k not in df]
    if missing:
        raise FolderError(f"{path} has no column {missing[0]!r}: not a study's summary")
    return df


def describe(folder: Path) -> dict:
    """One results folder: its config (dotted, the keys of the studies it left off dropped:
    `relevant`), studies, architectures, cells, findings, the newest summary's time and the
    nadpipe versions that made its cells. FolderError names a file that cannot be read."""
    config = relevant(flat(_config(folder)))
    studies, archs, cells, found, versions, newest = [], set(), 0, [], set(), 0.0
    for path in sorted(folder.glob("*/summary.parquet")):
        df = _summary(path)
        study = str(df["study"].iloc[0])
        studies.append(study)
        archs |= set(df["arch"])
        cells += len(df.drop_duplicates(["arch", "variant", "seed"]))
        versions |= set(df["nadpipe_version"].dropna()) if "nadpipe_version" in df else set()
        newest = max(newest, path.stat().st_mtime)
        found += [f"{study}: {line}" for line in _findings(study, df, config)]
    when = datetime.datetime.fromtimestamp(newest).strftime("%Y-%m-%d %H:%M")
    return {
        "folder": folder.name,
        "studies": studies,
        "architectures": sorted(archs),
        "cells": cells,
        "findings": found,
        "made": when,
        "versions": sorted(versions),
        "cpu_seconds": _cpu(folder),
        "config": config,
    }


def _cpu(folder: Path) -> float | None:
    """The CPU-seconds the jobs run in `folder` took, every run's, as its cost records say
    (nadpipe.cost.record); None where it has none."""
    rows = cost.records_of(folder)
    return sum(r["cpu"] for r in rows) if rows else None


def _findings(study: str, df, config: dict) -> list[str]:
    """What a study's summary shows, in its study's words: a registry study's, or one of a
    module the folder's config names (study_modules), imported from here if it can be."""
    if study in REGISTRY:
        return list(REGISTRY[study].findings(df))
    modules = [m for m in config.get("study_modules") or [] if isinstance(m, str)]
    with contextlib.suppress(Exception):  # a module not importable here: no words for it
        load_modules(modules, lambda i: "study_modules")
    if study in REGISTRY:
        return list(REGISTRY[study].findings(df))
    return [f"(a study of one's own whose module is not importable here: "
            f"{', '.join(modules) or 'none named'})"]  # fmt: skip


def _differ(configs: list[dict]) -> list[str]:
    """The keys whose values are not the same in every config that has them (a study's keys
    only among the configs that run it: `relevant`), or that some config lacks outside a study
    it leaves off (an architecture one config defines)."""
    off = [_off(c) for c in configs]
    keys = sorted({k for c in configs for k in c})
    out = []
    for k in keys:
        values = {repr(c[k]) for c in configs if k in c}
        missing = [c for c, o in zip(configs, off, strict=True) if k not in c and
                   k.split(".")[0] not in o]  # fmt: skip
        if len(values) > 1 or missing:
            out.append(k)
    return out


def side_by_side(root: str | Path) -> list[dict]:
    """Every results folder under `root` (`describe`), with `differs`: the config keys whose
    values are not the same in all of them (`_differ`), and their values where it has them."""
    runs = []
    for folder in folders(root):
        try:
            runs.append(describe(folder))
        except FolderError as e:  # one bad folder is said; the others are still listed
            runs.append({"folder": folder.name, "unreadable": str(e)})
    good = [r for r in runs if "unreadable" not in r]
    differ = _differ([r["config"] for r in good])
    for r in good:
        r["differs"] = {k: r["config"][k] for k in differ if k in r["config"]}
    return runs


def text(runs: list[dict]) -> str:
    """The folders as a table, a row each (its other findings on the lines below it, under its
    first), then the config keys whose values differ, then the folders that could not be
    read."""
    if not runs:
        return "no results folder here (a folder with config.yaml and a study's summary.parquet)"
    good = [r for r in runs if "unreadable" not in r]
    head = ["folder", "finished", "nadpipe", "studies", "architectures", "cells", "CPU", "finding"]
    rows = []
    for r in good:
        found = r["findings"] or ["(no finding stated)"]
        cpu = "?" if r.get("cpu_seconds") is None else clock(r["cpu_seconds"])
        rows.append([f"{r['folder']}/", r["made"], ", ".join(r["versions"]) or "?",
                     ", ".join(r["studies"]), ", ".join(r["architectures"]), str(r["cells"]),
                     cpu, found[0]])  # fmt: skip
        rows += [[""] * (len(head) - 1) + [f] for f in found[1:]]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
             for row in [head, *rows]]  # fmt: skip
    differ = sorted({k for r in good for k in r["differs"]})
    for key in differ:
        values = ", ".join(f"{r['folder']}/ {r['differs'][key]!r}" for r in good
                           if key in r["differs"])  # fmt: skip
        lines.append(f"differs: {key}: {values}")
    lines += [f"{r['folder']}/: not read: {r['unreadable']}" for r in runs if "unreadable" in r]
    return "\n".join(line.rstrip() for line in lines)


def diff(a: str | Path, b: str | Path, paired: dict | None = None) -> dict:
    """Two results folders: the config keys that differ (A's value, B's), per study both ran
    its findings in each, and per cell of a D(v1) ⊕ D(v2) study whose verdict or reliance
    angles changed, both (`cell_pairs`; `paired`: those, when read already)."""
    # deferred: it loads pandas, which importing folders does not
    from .findings import TIE_SE

    one, two = describe(Path(a)), describe(Path(b))
    absent = "(not in its config)"
    differs = {
        k: [one["config"].get(k, absent), two["config"].get(k, absent)]
        for k in _differ([one["config"], two["config"]])
    }
    studies, cells = {}, []
    paired = cell_pairs(a, b) if paired is None else paired
    for study in [s for s in one["studies"] if s in two["studies"]]:
        studies[study] = {
            "a": [f for f in one["findings"] if f.startswith(f"{study}: ")],
            "b": [f for f in two["findings"] if f.startswith(f"{study}: ")],
            "apart": study in paired and paired[study].empty,  # other architectures or cells
        }
        if study not in paired or paired[study].empty:
            continue
        key = ["arch", "nad_i", "nad_j"]
        for row in paired[study].to_dict("records"):
            span = [
                [round(row[f"reliance_min_{s}"], 1), round(row[f"reliance_max_{s}"], 1)]
                for s in "ab"
            ]
            same = all(x == y or (x != x and y != y) for x, y in zip(*span, strict=True))
            if row["verdict_a"] != row["verdict_b"] or not same:  # NaN: no learned seed
                # the seeds' mean angle and its half-width (TIE_SE standard errors; 0: one seed)
                interval = [
                    [round(row[f"reliance_mean_{s}"], 1),
                     round(TIE_SE * row[f"reliance_se_{s}"], 1) if row[f"reliance_se_{s}"] ==
                     row[f"reliance_se_{s}"] else 0.0]
                    for s in "ab"
                ]  # fmt: skip
                cells.append(
                    {
                        "study": study,
                        **{k: row[k] for k in key},
                        "verdict": [row["verdict_a"], row["verdict_b"]],
                        "reliance_deg": span,
                        "reliance_interval": interval,
                    }
                )
    return {"a": one["folder"], "b": two["folder"], "differs": differs, "studies": studies,
            "cells": cells}  # fmt: skip


def cell_pairs(a: str | Path, b: str | Path) -> dict:
    """Per D(v1) ⊕ D(v2) study both folders ran: every cell both have, its verdict and angles
    in A (columns ending _a) and in B (_b), from nadpipe.findings.cell_verdicts."""
    # deferred: it loads pandas, which importing folders does not
    from .findings import cell_verdicts

    out = {}
    for path in sorted(Path(a).glob("*/summary.parquet")):
        other = Path(b) / path.parent.name / "summary.parquet"
        if not other.is_file():
            continue
        da, db = _summary(path), _summary(other)
        if not {"nad_i", "nad_j", "reliance_deg"} <= set(da.columns) & set(db.columns):
            continue
        key = ["arch", "nad_i", "nad_j"]
        both = cell_verdicts(da).merge(cell_verdicts(db), on=key, suffixes=("_a", "_b"))
        out[str(da["study"].iloc[0])] = both
    return out


def diff_figures(
    a: str | Path, b: str | Path, output: str, paired: dict | None = None
) -> list[str]:
    """The figure of each D(v1) ⊕ D(v2) study both folders ran
    (nadpipe.plots_compare.verdict_change; `paired`: their `cell_pairs`, when read already):
    the first at `output`, any other at `output` with its study's name before the suffix. The
    files written."""
    # deferred: it loads matplotlib, which importing folders does not
    from .plots_compare import verdict_change

    written = []
    paired = cell_pairs(a, b) if paired is None else paired
    common = [(study, both) for study, both in paired.items() if not both.empty]
    for k, (study, both) in enumerate(common):
        path = output if k == 0 else str(Path(output).with_suffix(f".{study}.png"))
        verdict_change(both, (Path(a).name, Path(b).name), study, path)
        written.append(path)
    return written


def diff_text(d: dict, every: bool = False) -> str:
    """`diff` as a reader takes it in: the keys that differ, the cells whose verdict changed,
    the findings; the cells that kept their verdict while their angles moved counted, and
    listed when `every`."""
    lines = [f"{d['a']}/ -> {d['b']}/"]
    lines += [f"  {k}: {va} -> {vb}" for k, (va, vb) in d["differs"].items()] or [
        "  the same config"
    ]

    def angle(mean: float, half: float) -> str:
        return "n/a" if mean != mean else f"{mean:g} ± {half:g}°" if half else f"{mean:g}°"

    def cell(c: dict) -> str:
        (va, vb), (ia, ib) = c["verdict"], c["reliance_interval"]
        return (
            f"  {c['study']} {c['arch']} ({c['nad_i']}, {c['nad_j']}): {va} -> {vb}; reliance "
            f"{angle(*ia)} -> {angle(*ib)}"
        )

    changed = [c for c in d["cells"] if c["verdict"][0] != c["verdict"][1]]
    moved = [c for c in d["cells"] if c["verdict"][0] == c["verdict"][1]]
    lines += [cell(c) for c in changed]
    for study, found in d["studies"].items():
        if found.get("apart"):
            lines.append(f"  {study}: no cell in common (other architectures or NAD indices)")
        if found["a"] == found["b"]:
            lines.append(f"  {study}: the same findings")
            continue
        lines += [f"  - {f}" for f in found["a"]] + [f"  + {f}" for f in found["b"]]
    if moved and every:
        lines.append("  cells whose verdict stayed, their reliance angles moved:")
        lines += [cell(c) for c in moved]
    elif moved:
        lines.append(
            f"  {len(moved)} cell(s) kept their verdict while their reliance angles moved "
            "(--all lists them)"
        )
    lines += [f"  the figure: {f}" for f in d.get("figures", [])]
    return "\n".join(lines)
