"""Registry models that passed the config's model check, remembered between commands.

The config check builds every model a config names with keyword arguments and runs it once
(nadpipe.models.check_model): for a registry model given kwargs that means importing torch, 2 of
the 3.5 seconds of a `snakemake -n` on a two-model config (docs/pipeline.md). A pass is the same
for the same model spec, library source, torch and Python, so a run that executes jobs remembers
it (Snakemake's onstart: a dry run writes nothing) and every later command with that spec reads it
instead of building the model. Only registry models are remembered: their code is the library's,
in the key; a user's model is checked every time. A failure is never remembered.

The verdicts live in `$NADPIPE_CACHE` (default `$XDG_CACHE_HOME/nadpipe`, else
`~/.cache/nadpipe`), one empty file per pass under `model-checks/`; deleting the folder only
makes the next command check again.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from .io import CACHE_ENV as CACHE_ENV  # the variable the model checks' folder follows
from .io import cache
from .settings import REGISTRY_NAMES, ModelSpec

_passed: list[str] = []  # keys of the checks this process ran and passed


def folder() -> Path:
    """Where the verdicts live (in nadpipe.io.cache, whose first choice is CACHE_ENV)."""
    return cache() / "model-checks"


def _key(spec: ModelSpec) -> str | None:
    if spec.model not in REGISTRY_NAMES:
        return None
    from .provenance import source_hash, torch_version

    text = "\0".join([repr(spec), source_hash(), torch_version(), sys.version])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def known(spec: ModelSpec) -> bool:
    """Whether `spec` passed the check before (same spec, library source, torch, Python)."""
    key = _key(spec)
    return key is not None and (folder() / key).exists()


def passed(spec: ModelSpec) -> None:
    """`spec` passed the check in this process (remembered by `remember`)."""
    key = _key(spec)
    if key is not None:
        _passed.append(key)


def remember() -> None:
    """Write this process's passes (a run that executes jobs); a cache that cannot be written
    costs only the check next time."""
    try:
        folder().mkdir(parents=True, exist_ok=True)
        for key in _passed:
            (folder() / key).touch()
    except OSError:
        pass
