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
    raw = validate(with_overrides(config, overrides) if overrides else config, schema_path)
    cfg = build(raw)
    return cfg, check(cfg, raw)
