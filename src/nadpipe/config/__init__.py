"""The config: validated against the schema with strict numbers (schema), built into the typed
`Config` the workflow plans from with every default of nadpipe.settings (build), checked for
what a schema cannot express (checks); the key table comes from the same sources (keys).

The Snakefile calls `load_config` once at parse time, so a config that cannot mean anything
stops the run before any job, with a message naming the key. Loading needs no torch unless a
model has to be checked (user models, keyword arguments, other input shapes).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..io import STUDIES_ENV
from ..studies import StudyModuleError, load_modules
from .build import Config, build, results_root, with_overrides
from .checks import check, check_model, model_specs, nad_count, rank_warnings
from .keys import key_rows, reference_table
from .schema import STUDY_SETTINGS, ConfigError, check_yaml, load_schema, validate

NAME_PATTERN = r"[A-Za-z0-9_-]{1,64}"  # an architecture's name: it is part of file paths

__all__ = [
    "NAME_PATTERN",
    "STUDY_SETTINGS",
    "Config",
    "ConfigError",
    "build",
    "check",
    "check_model",
    "check_yaml",
    "key_rows",
    "load_config",
    "load_schema",
    "model_specs",
    "nad_count",
    "rank_warnings",
    "reference_table",
    "results_root",
    "validate",
    "with_overrides",
]


def load_config(config: dict, schema_path: str | Path, overrides=None) -> tuple[Config, list[str]]:
    """Validate `config` (with the command line's `--config` `overrides` typed as in a file),
    fill the defaults, run the checks: (Config, warnings)."""
    merged = with_overrides(config, overrides) if overrides else config
    said = load_study_modules(merged)
    raw = validate(merged, schema_path)
    cfg = build(raw)
    return cfg, said + shadowed(raw, overrides or {}) + check(cfg, raw)


def _leaves(data: dict, prefix: tuple = ()) -> list[tuple[tuple, object]]:
    out = []
    for k, v in data.items():
        out += _leaves(v, (*prefix, k)) if isinstance(v, dict) else [((*prefix, k), v)]
    return out


def shadowed(raw: dict, overrides: dict) -> list[str]:
    """What a `--config` override does not reach because a more specific key of the config
    comes first (nads.X under an architecture's own nads.X; STUDY.train.X under
    STUDY.train_per_arch.ARCH.X): one warning each, naming both keys."""
    out = []
    for path, value in _leaves(with_overrides({}, overrides)):
        if path[0] == "nads" and len(path) == 2:
            for arch, entry in sorted(raw.get("architectures", {}).items()):
                own = (entry or {}).get("nads", {})
                if path[1] in own and own[path[1]] != value:
                    out.append(
                        (
                            f"nads.{path[1]}={value}",
                            arch,
                            f"architectures.{arch}.nads.{path[1]}",
                            own[path[1]],
                        )
                    )
        elif len(path) == 3 and path[1] == "train" and isinstance(raw.get(path[0]), dict):
            per = raw[path[0]].get("train_per_arch", {})
            for arch, own in sorted(per.items()):
                if path[2] in (own or {}) and own[path[2]] != value:
                    key = f"{path[0]}.train_per_arch.{arch}.{path[2]}"
                    out.append((f"{path[0]}.train.{path[2]}={value}", arch, key, own[path[2]]))
    return [
        f"--config {given} does not reach {arch}: the config's own {key} ({kept}) comes "
        f"first, so {arch} keeps {kept}; override {key} to change it"
        for given, arch, key, kept in out
    ]


def load_study_modules(config: dict) -> list[str]:
    """Import the config's `study_modules` before it is validated (their studies' blocks are
    keys of it); a module that cannot be imported stops the run naming the key. Returns a
    warning when the environment variable NADPIPE_STUDIES names modules too."""

    modules = config.get("study_modules") or []
    if isinstance(modules, list) and all(isinstance(m, str) for m in modules):
        try:
            load_modules(modules, lambda i: f"config key 'study_modules.{i}'")
        except StudyModuleError as e:
            raise ConfigError(str(e)) from None
    named = os.environ.get(STUDIES_ENV, "").strip()
    if not named:
        return []
    return [
        f"the environment variable {STUDIES_ENV}={named} names study modules; the commands "
        f"nadpipe prints (the report, a --forcerun) do not carry it, so typed as printed "
        f"they would not find its studies: name them in the config instead (study_modules: "
        f"[{named}]) and unset {STUDIES_ENV}"
    ]
