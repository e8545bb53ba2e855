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

from . import cifar, studies
from .models import REGISTRY, ModelError, build_model, check_output_shape
from .nads import NadSettings
from .train import TrainSettings

STUDIES = ("nad_pairs", *studies.STUDIES)
# (input channels, classes) of each study's models; NADs use single-logit 1-channel networks
SHAPES = {"nads": (1, 1), "nad_pairs": (2, 2), **studies.SHAPES}


class ConfigError(ValueError):
    """The config is invalid; the message names the key and how to fix it."""


class Cell(NamedTuple):
    arch: str
    i: int
    j: int
    seed: int


class StudyCell(NamedTuple):
    study: str
    arch: str
    variant: str  # "k<NAD>" (cifar_nad, single_direction), "i<NAD>" (poison),
    #               "original" | "flipped" (flip), "f<a>_<b>" (fourier)
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


def _check_model(cfg: dict, arch: str, shapes: set[tuple[int, int]]) -> None:
    entry = arch_entry(cfg, arch)
    try:
        for in_channels, num_classes in sorted(shapes):
            net = build_model(entry["model"], in_channels, num_classes, entry["kwargs"])
            check_output_shape(net, entry["model"], in_channels, num_classes)
    except ModelError as e:
        raise ConfigError(f"config key 'architectures.{arch}.model': {e}") from e
    except TypeError as e:
        raise ConfigError(f"config key 'architectures.{arch}.kwargs': {e}") from e


def check(cfg: dict) -> None:
    """Checks the schema cannot express; raise `ConfigError` naming the key."""
    used: set[str] = set()
    shapes: dict[str, set[tuple[int, int]]] = {}
    for study in STUDIES:
        s = cfg[study]
        if not s["enabled"]:
            continue
        for arch in s["architectures"]:
            _check_arch(cfg, arch, f"{study}.architectures")
            used.add(arch)
            shapes.setdefault(arch, set()).add(SHAPES[study])
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
    for arch in used:
        shapes.setdefault(nad_source(cfg, arch), set()).add(SHAPES["nads"])
    if any(cfg[study]["enabled"] for study in cifar.STUDIES):
        c = cfg["cifar10"]
        if not c["download"] and cifar.missing_files(c["root"]):
            raise ConfigError(cifar.missing_message(c["root"]))
        if len(c["mean"]) != len(c["std"]):
            raise ConfigError("config keys 'cifar10.mean' and 'cifar10.std' differ in length")
    pairs = cfg["analysis"]["cross_section"]["pairs"]
    indices = set(cfg["nad_pairs"]["indices"])
    for k, (i, j) in enumerate(pairs or []):
        if i not in indices or j not in indices:
            raise ConfigError(
                f"config key 'analysis.cross_section.pairs.{k}': ({i}, {j}) is not a pair of "
                f"nad_pairs.indices {sorted(indices)}"
            )
    for arch in sorted(shapes):
        entry = arch_entry(cfg, arch)
        if entry["model"] not in REGISTRY or entry["kwargs"]:
            _check_model(cfg, arch, shapes[arch])


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


def _study_indices(cfg: dict) -> dict[str, dict[str, set[int]]]:
    """Per NAD architecture, the NAD indices the enabled studies use, by study key."""
    out: dict[str, dict[str, set[int]]] = {}
    for study, extra in (
        ("nad_pairs", 0),
        ("cifar_nad", 0),
        ("poison", 1),
        ("single_direction", 0),
    ):
        s = cfg[study]
        if not s["enabled"]:
            continue
        for arch in s["architectures"]:
            used = out.setdefault(nad_source(cfg, arch), {}).setdefault(f"{study}.indices", set())
            used.update(k + d for k in s["indices"] for d in range(extra + 1))
    return out


def rank_warnings(cfg: dict) -> list[str]:
    """Warnings for NAD indices at or past the rank of their covariance estimate: from n
    sensitivity samples the centred covariance has rank at most n - 1, and the NADs past it
    span its null space in arbitrary order."""
    out = []
    for arch, by_key in sorted(_study_indices(cfg).items()):
        s = nad_settings(cfg, arch)
        rank = min(s.n_networks * s.n_points - 1, 1024)
        for key, indices in sorted(by_key.items()):
            past = sorted(i for i in indices if i >= rank)
            if not past:
                continue
            out.append(
                f"NAD indices {past} of {key} are at or past the rank ({rank}) of "
                f"{arch}'s NAD covariance estimate from {s.n_networks} networks x {s.n_points} "
                f"point(s): those NADs span its null space in arbitrary order. Raise "
                f"nads.n_networks above {max(past) + 1} for them to be ordered."
            )
    return out


def nad_architectures(cfg: dict) -> list[str]:
    """Architectures whose NADs some enabled study needs."""
    archs = {c.arch for c in pair_cells(cfg)}
    archs.update(
        c.arch for study in studies.STUDIES if studies.needs_nads(study)
        for c in study_cells(cfg, study)
    )  # fmt: skip
    return sorted({nad_source(cfg, a) for a in archs})


def study_cells(cfg: dict, study: str) -> list[StudyCell]:
    """Every (study, arch, variant, seed) of an enabled per-model study, in a fixed order."""
    s = cfg[study]
    if not s["enabled"]:
        return []
    return [
        StudyCell(study, a, v, seed)
        for a, v, seed in product(s["architectures"], studies.variants(study, s), s["seeds"])
    ]


def cifar_settings(cfg: dict) -> dict:
    """The `cifar.CifarSettings` fields: what the images are read and prepared with."""
    c = cfg["cifar10"]
    normalize = c["normalize"]
    return {
        "root": c["root"],
        "verify_md5": c["verify_md5"],
        "n_train": c["n_train"],
        "n_test": c["n_test"],
        "mean": c["mean"] if normalize else None,
        "std": c["std"] if normalize else None,
    }


def study_data(cfg: dict, study: str, arch: str) -> dict:
    """A study's own data settings for `arch` (cifar_nad: eps, sigma; poison: eps;
    single_direction and fourier: eps, sigma, n_train, n_test)."""
    s = cfg[study]
    if study == "cifar_nad":
        return {"eps": s["eps"], "sigma": s["sigma_per_arch"].get(arch, s["sigma"])}
    if study == "poison":
        return {"eps": s["eps"]}
    if study in ("single_direction", "fourier"):
        return {k: s[k] for k in ("eps", "sigma", "n_train", "n_test")}
    return {}


def study_job(cfg: dict, study: str, arch: str) -> dict:
    """Everything a per-model study's train job of `arch` depends on (its Snakemake params)."""
    return {
        **model_spec(cfg, arch),
        "train": train_params(cfg, study, arch),
        "data": study_data(cfg, study, arch),
        "cifar10": cifar_settings(cfg) if studies.needs_cifar(study) else None,
        "nad_params": nad_params(cfg, nad_source(cfg, arch)) if studies.needs_nads(study) else None,
    }


def train_params(cfg: dict, study: str, arch: str) -> dict:
    """The training settings of `arch` in `study` as a plain dict (Snakemake params)."""
    return asdict(train_settings(cfg, study, arch))


def pair_data(cfg: dict) -> dict:
    """What the NAD-pair datasets are drawn with, besides the directions and the seed."""
    s = cfg["nad_pairs"]
    return {k: s[k] for k in ("eps1", "eps2", "sigma", "n_train", "n_test")}
