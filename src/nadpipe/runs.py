"""Every results folder under a directory, side by side (`nadpipe runs`): what their configs set
differently, their studies, architectures and cells, what each found (the studies' findings,
the lines a run ends with), and when and at which version it was made. Reads each folder's
resolved config (config.yaml) and its summaries; computes nothing."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any


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


def describe(folder: Path) -> dict:
    """One results folder: its config (dotted), studies, architectures, cells, findings, the
    newest summary's time and the nadpipe versions that made its cells."""
    import pandas as pd
    import yaml

    from .studies import REGISTRY

    config = flat(yaml.safe_load((folder / "config.yaml").read_text()) or {})
    studies, archs, cells, found, versions, newest = [], set(), 0, [], set(), 0.0
    for path in sorted(folder.glob("*/summary.parquet")):
        df = pd.read_parquet(path)
        study = str(df["study"].iloc[0])
        studies.append(study)
        archs |= set(df["arch"])
        cells += len(df.drop_duplicates(["arch", "variant", "seed"]))
        versions |= set(df["nadpipe_version"].dropna()) if "nadpipe_version" in df else set()
        newest = max(newest, path.stat().st_mtime)
        if study in REGISTRY:
            found += [f"{study}: {line}" for line in REGISTRY[study].findings(df)]
    when = datetime.datetime.fromtimestamp(newest).strftime("%Y-%m-%d %H:%M")
    return {
        "folder": folder.name,
        "studies": studies,
        "architectures": sorted(archs),
        "cells": cells,
        "findings": found,
        "made": when,
        "versions": sorted(versions),
        "config": config,
    }


def side_by_side(root: str | Path) -> list[dict]:
    """Every results folder under `root` (`describe`), with `differs`: the config keys whose
    values are not the same in all of them (a key one folder lacks counts), and their values."""
    runs = [describe(f) for f in folders(root)]
    keys = sorted({k for r in runs for k in r["config"]})
    differ = [k for k in keys if len({repr(r["config"].get(k)) for r in runs}) > 1]
    for r in runs:
        r["differs"] = {k: r["config"].get(k) for k in differ}
    return runs


def text(runs: list[dict]) -> str:
    """The table as a reader takes it in: a block per folder, its differing keys first."""
    if not runs:
        return "no results folder here (a folder with config.yaml and a study's summary.parquet)"
    lines = []
    for r in runs:
        version = ", ".join(r["versions"]) or "unknown"
        lines.append(
            f"{r['folder']}/: {', '.join(r['studies'])}; {', '.join(r['architectures'])}; "
            f"{r['cells']} cells; made {r['made']} by nadpipe {version}"
        )
        for key, value in r["differs"].items():
            lines.append(f"  {key}: {value}")
        lines += [f"  - {f}" for f in r["findings"]] or ["  (no finding stated)"]
    return "\n".join(lines)
