"""The config: schema validation with defaults, checks a schema cannot express, and the grid.

The Snakefile calls `load_config` once at parse time, so a bad config stops the run before any
job, with a message naming the key. Rules then take their values from the helpers here
(per architecture, per cell), so a change to one architecture re-plans only its jobs.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import asdict
from itertools import product
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema
import yaml

from .models import REGISTRY, ModelError, build_model, check_output_shape
from .nads import NadSettings
from .train import TrainSettings

STUDIES = ("nad_pairs",)


class ConfigError(ValueError):
    """The config is invalid; the message names the key and how to fix it."""


class Cell(NamedTuple):
    arch: str
    i: int
    j: int
    seed: int


def _with_defaults(cls: type) -> type:
    """A validator class that also fills in each property's `default` (jsonschema FAQ)."""
    validate_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # noqa: ANN001
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(cls, {"properties": set_defaults})


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _schema_error_message(err: jsonschema.ValidationError, config: dict) -> str:
    key = _key(err.absolute_path)
    if err.validator == "additionalProperties":
        # name the unknown key and the closest valid one
        parent = err.instance if isinstance(err.instance, dict) else {}
        allowed = list(err.schema.get("properties", {}))
        unknown = [k for k in parent if k not in allowed]
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            hints.append(f"unknown key {'.'.join([*map(str, err.absolute_path), k])!r}{hint}")
        return "; ".join(hints) + f". Valid keys here: {', '.join(allowed)}"
    return f"config key {key!r}: {err.message}"


def validate(config: dict, schema_path: str | Path) -> dict:
    """A deep copy of `config`, validated against the schema with defaults filled in."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    cls = _with_defaults(jsonschema.validators.validator_for(schema))
    cfg = copy.deepcopy(dict(config))
    errors = sorted(cls(schema).iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError(
            "invalid config:\n  " + "\n  ".join(_schema_error_message(e, cfg) for e in errors)
        )
    return cfg


def arch_entry(cfg: dict, arch: str) -> dict:
    """The architecture's entry, or the registry default when the name is a registry model."""
    entry = cfg["architectures"].get(arch)
    if entry is None:
        return {"model": arch, "kwargs": {}, "nads_from": None, "nads": {}}
    return {"model": arch, **entry}


def _check_arch(cfg: dict, arch: str, where: str) -> None:
    if arch not in cfg["architectures"] and arch not in REGISTRY:
        close = difflib.get_close_matches(arch, [*cfg["architectures"], *REGISTRY], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"config key {where!r}: unknown architecture {arch!r}{hint}; define it under "
            f"'architectures' or use a registry model: {', '.join(sorted(REGISTRY))}"
        )


def _check_model(cfg: dict, arch: str) -> None:
    entry = arch_entry(cfg, arch)
    try:
        net = build_model(entry["model"], 1, 1, entry["kwargs"])
        check_output_shape(net, entry["model"], 1, 1)
        net = build_model(entry["model"], 2, 2, entry["kwargs"])
        check_output_shape(net, entry["model"], 2, 2)
    except ModelError as e:
        raise ConfigError(f"config key 'architectures.{arch}.model': {e}") from e
    except TypeError as e:
        raise ConfigError(f"config key 'architectures.{arch}.kwargs': {e}") from e


def check(cfg: dict) -> None:
    """Checks the schema cannot express; raise `ConfigError` naming the key."""
    used = set()
    for study in STUDIES:
        s = cfg[study]
        if not s["enabled"]:
            continue
        for arch in s["architectures"]:
            _check_arch(cfg, arch, f"{study}.architectures")
            used.add(arch)
        for arch in s.get("train_per_arch", {}):
            _check_arch(cfg, arch, f"{study}.train_per_arch")
    for arch in sorted(used):
        src = arch_entry(cfg, arch)["nads_from"]
        if src is not None:
            _check_arch(cfg, src, f"architectures.{arch}.nads_from")
            if arch_entry(cfg, src)["nads_from"] is not None:
                raise ConfigError(
                    f"config key 'architectures.{arch}.nads_from': {src!r} takes its NADs from "
                    f"another architecture itself; point to the source directly"
                )
            used.add(src)
    pairs = cfg["analysis"]["cross_section"]["pairs"]
    indices = set(cfg["nad_pairs"]["indices"])
    for k, (i, j) in enumerate(pairs or []):
        if i not in indices or j not in indices:
            raise ConfigError(
                f"config key 'analysis.cross_section.pairs.{k}': ({i}, {j}) is not a pair of "
                f"nad_pairs.indices {sorted(indices)}"
            )
    for arch in sorted(used):
        entry = arch_entry(cfg, arch)
        if entry["model"] not in REGISTRY or entry["kwargs"]:
            _check_model(cfg, arch)


def load_config(config: dict, schema_path: str | Path) -> dict:
    """Validate, fill defaults and check `config`; the result is what rules read from."""
    cfg = validate(config, schema_path)
    check(cfg)
    return cfg


def nad_source(cfg: dict, arch: str) -> str:
    """The architecture whose NADs `arch` uses."""
    return arch_entry(cfg, arch)["nads_from"] or arch


def _nad_block(cfg: dict, arch: str) -> dict:
    return {**cfg["nads"], **arch_entry(cfg, arch).get("nads", {})}


def nad_settings(cfg: dict, arch: str) -> NadSettings:
    """What the NADs of `arch` are computed with (the warning threshold is not part of it)."""
    fields = NadSettings.__dataclass_fields__
    return NadSettings(**{k: v for k, v in _nad_block(cfg, arch).items() if k in fields})


def nad_min_overlap(cfg: dict, arch: str) -> float:
    return _nad_block(cfg, arch)["min_overlap_top10"]


def train_settings(cfg: dict, study: str, arch: str) -> TrainSettings:
    s = cfg[study]
    return TrainSettings(**{**s["train"], **s["train_per_arch"].get(arch, {})})


def model_spec(cfg: dict, arch: str) -> dict:
    entry = arch_entry(cfg, arch)
    return {"model": entry["model"], "kwargs": entry["kwargs"]}


def nad_params(cfg: dict, arch: str) -> dict:
    """Everything the nads job of `arch` depends on (its Snakemake params)."""
    return {**model_spec(cfg, arch), "settings": asdict(nad_settings(cfg, arch))}


def pair_cells(cfg: dict) -> list[Cell]:
    """Every (arch, i, j, seed) of the NAD-pair study, in a fixed order."""
    s = cfg["nad_pairs"]
    if not s["enabled"]:
        return []
    return [
        Cell(a, i, j, seed)
        for a, i, j, seed in product(s["architectures"], s["indices"], s["indices"], s["seeds"])
    ]


def section_cells(cfg: dict, arch: str) -> list[Cell]:
    """The cells the cross-section figure of `arch` shows: the study's first seed, and the
    pairs of `analysis.cross_section.pairs` (every pair when null)."""
    first = cfg["nad_pairs"]["seeds"][0]
    pairs = cfg["analysis"]["cross_section"]["pairs"]
    keep = None if pairs is None else {tuple(p) for p in pairs}
    return [
        c
        for c in pair_cells(cfg)
        if c.arch == arch and c.seed == first and (keep is None or (c.i, c.j) in keep)
    ]


def rank_warnings(cfg: dict) -> list[str]:
    """Warnings for NAD indices at or past the rank of their covariance estimate: from n
    sensitivity samples the centred covariance has rank at most n - 1, and the NADs past it
    span its null space in arbitrary order."""
    out = []
    indices = cfg["nad_pairs"]["indices"] if cfg["nad_pairs"]["enabled"] else []
    for arch in nad_architectures(cfg):
        s = nad_settings(cfg, arch)
        rank = min(s.n_networks * s.n_points - 1, 1024)
        past = [i for i in indices if i >= rank]
        if past:
            out.append(
                f"NAD indices {past} of nad_pairs.indices are at or past the rank ({rank}) of "
                f"{arch}'s NAD covariance estimate from {s.n_networks} networks x {s.n_points} "
                f"point(s): those NADs span its null space in arbitrary order. Raise "
                f"nads.n_networks above {max(past) + 1} for them to be ordered."
            )
    return out


def nad_architectures(cfg: dict) -> list[str]:
    """Architectures whose NADs some enabled study needs."""
    return sorted({nad_source(cfg, c.arch) for c in pair_cells(cfg)})


def train_params(cfg: dict, study: str, arch: str) -> dict:
    """The training settings of `arch` in `study` as a plain dict (Snakemake params)."""
    return asdict(train_settings(cfg, study, arch))


def pair_data(cfg: dict) -> dict:
    """What the NAD-pair datasets are drawn with, besides the directions and the seed."""
    s = cfg["nad_pairs"]
    return {k: s[k] for k in ("eps1", "eps2", "sigma", "n_train", "n_test")}
