"""The table of every config key (README, docs/keys.md): its default from nadpipe.settings and
its meaning from the schema."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import settings as st
from ..settings import Architecture, StudySettings
from .schema import STUDY_SETTINGS, load_schema


def _resolve(schema: dict, node: dict) -> dict:
    """A schema node with its $ref and allOf parts merged in (their properties together)."""
    out = dict(node)
    props = dict(node.get("properties", {}))
    parts = [node["$ref"]] if "$ref" in node else []
    parts += [p["$ref"] for p in node.get("allOf", []) if "$ref" in p]
    for ref in parts:
        target = _resolve(schema, schema["$defs"][ref.split("/")[-1]])
        props = {**target.get("properties", {}), **props}
        out.setdefault("description", target.get("description"))
    out["properties"] = props
    return out


def _describe(schema: dict, node: dict) -> str:
    node = _resolve(schema, node)
    text = " ".join(str(node.get("description", "")).split())
    if "enum" in node:
        text += f" One of: {', '.join(map(str, node['enum']))}."
    return text.replace("|", "\\|")


def _fmt(value: Any) -> str:
    text = yaml.safe_dump(st.plain(value), default_flow_style=True, width=1000)
    return f"`{text.strip().removesuffix('...').strip()}`"


def _rows(schema: dict, node: dict, default: Any, prefix: str) -> list[tuple[str, str, str]]:
    node = _resolve(schema, node)
    out = []
    for name, sub in node["properties"].items():
        value = getattr(default, name)
        if is_dataclass(value):
            out += _rows(schema, sub, value, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", _fmt(value), _describe(schema, sub)))
    return out


def reference_table(schema_path: str | Path) -> str:
    """Markdown table of every config key: its default (nadpipe.settings) and meaning (the
    schema). The README holds it; a test keeps the two in agreement."""
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{k}` | {d} | {m} |" for k, d, m in key_rows(schema_path)]
    return "\n".join(lines) + "\n"


def key_rows(schema_path: str | Path) -> list[tuple[str, str, str]]:
    """(key, default, meaning) of every config key, as the key table lists them."""
    schema = load_schema(schema_path)
    props = schema["properties"]
    rows = [
        (
            "results",
            "`results`, or `results-NAME` with `--configfile NAME.yaml`",
            _describe(schema, props["results"]),
        ),
        ("study_modules", "`[]`", _describe(schema, props["study_modules"])),
    ]
    arch = props["architectures"]["additionalProperties"]
    for name, sub in arch["properties"].items():
        default = "the entry's name" if name == "model" else _fmt(getattr(Architecture(), name))
        rows.append((f"architectures.NAME.{name}", default, _describe(schema, sub)))
    for block, cls in st.BLOCKS.items():
        rows += _rows(schema, props[block], cls(), f"{block}.")
    common = {f.name for f in fields(StudySettings)}
    study_schema = _resolve(schema, schema["$defs"]["study"])["properties"]
    for name in [f.name for f in fields(StudySettings)]:
        if name == "train":
            continue
        per = "; ".join(f"{s}: {_fmt(getattr(c(), name))}" for s, c in STUDY_SETTINGS.items())
        rows.append((f"STUDY.{name}", per, _describe(schema, study_schema[name])))
    train = _resolve(schema, schema["$defs"]["train_settings"])["properties"]
    for name in train:
        values = {s: getattr(c().train, name) for s, c in STUDY_SETTINGS.items()}
        base = getattr(st.TrainSettings(), name)
        others = "; ".join(f"{s}: {_fmt(v)}" for s, v in values.items() if v != base)
        default = _fmt(base) + (f" ({others})" if others else "")
        rows.append((f"STUDY.train.{name}", default, _describe(schema, train[name])))
    for study, cls in STUDY_SETTINGS.items():
        node = _resolve(schema, props[study])
        for name, sub in node["properties"].items():
            if name not in common:
                rows.append((f"{study}.{name}", _fmt(getattr(cls(), name)), _describe(schema, sub)))
    return rows
