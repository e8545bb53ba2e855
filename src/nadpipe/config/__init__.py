"""The config: validated against the schema with strict numbers (schema), built into the typed
`Config` the workflow plans from with every default of nadpipe.settings (build), checked for
what a schema cannot express (checks); the key table comes from the same sources (keys).

The Snakefile calls `load_config` once at parse time, so a config that cannot mean anything
stops the run before any job, with a message naming the key. Loading needs no torch unless a
model has to be checked (user models, keyword arguments, other input shapes).
"""

from __future__ import annotations

from pathlib import Path

from .build import Config, build, results_root, with_overrides
from .checks import check, check_model, model_specs, nad_count, rank_warnings
from .keys import key_rows, reference_table
from .schema import STUDY_SETTINGS, ConfigError, check_yaml, load_schema, validate

NAME_PATTERN = r"[A-Za-z0-9_-]{1,64}"  # an architecture's name: it is part of file paths

__all__ = [
    "NAME_PATTERN", "STUDY_SETTINGS", "Config", "ConfigError", "build", "check", "check_model",
    "check_yaml", "key_rows", "load_config", "load_schema", "model_specs", "nad_count",
    "rank_warnings", "reference_table", "results_root", "validate", "with_overrides",
]  # fmt: skip


def load_config(config: dict, schema_path: str | Path, overrides=None) -> tuple[Config, list[str]]:
    """Validate `config` (with the command line's `--config` `overrides` typed as in a file),
    fill the defaults, run the checks: (Config, warnings)."""
    merged = with_overrides(config, overrides) if overrides else config
    said = load_study_modules(merged)
    raw = validate(merged, schema_path)
    cfg = build(raw)
    return cfg, said + check(cfg, raw)


def load_study_modules(config: dict) -> list[str]:
    """Import the config's `study_modules` before it is validated (their studies' blocks are
    keys of it); a module that cannot be imported stops the run naming the key. Returns a
    warning when the environment variable NADPIPE_STUDIES names modules too."""
    import os

    from ..io import STUDIES_ENV
    from ..studies import StudyModuleError, load_modules

    modules = config.get("study_modules") or []
    if isinstance(modules, list) and all(isinstance(m, str) for m in modules):
        try:
            load_modules(modules, lambda i: f"config key 'study_modules.{i}'")
        except StudyModuleError as e:
            raise ConfigError(str(e)) from None
    named = os.environ.get(STUDIES_ENV, "").strip()
    if not named:
        return []
    return [f"the environment variable {STUDIES_ENV}={named} names study modules; the commands "
            f"nadpipe prints (the report, a --forcerun) do not carry it, so typed as printed "
            f"they would not find its studies: name them in the config instead (study_modules: "
            f"[{named}]) and unset {STUDIES_ENV}"]  # fmt: skip
