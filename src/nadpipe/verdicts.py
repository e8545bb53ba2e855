"""What probes of a registry model found, remembered between commands: that it passed the
config's model check, and whether copies of it stack in a vmap (nadpipe.batching.stackable).

The config check builds every model a config names with keyword arguments and runs it once
(nadpipe.models.check_model): for a registry model given kwargs that means importing torch, 2 of
the 3.5 seconds of a `snakemake -n` on a two-model config (docs/pipeline.md). A pass is the same
for the same model spec, library source, torch and Python, so a run that executes jobs remembers
it (Snakemake's onstart: a dry run writes nothing) and every later command with that spec reads it
instead of building the model. Only registry models are remembered: their code is the library's,
in the key; a user's model is checked every time. A failure is never remembered. Planning a
run that trains cells together probes whether its models stack, which imports torch too: the
answer, yes or no, is remembered the same way.

The verdicts live in `$NADPIPE_CACHE` (default `$XDG_CACHE_HOME/nadpipe`, else
`~/.cache/nadpipe`), under `model-checks/`: one empty file per pass, one file holding `1` or `0`
per stacking probe; deleting the folder only makes the next command probe again.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

from .io import CACHE_ENV as CACHE_ENV  # the variable the model checks' folder follows
from .io import cache
from .provenance import source_hash, torch_version
from .settings import REGISTRY_NAMES, ModelSpec

_found: dict[str, str] = {}  # what this process's probes found: file name -> content


def folder() -> Path:
    """Where the verdicts live (in nadpipe.io.cache, whose first choice is CACHE_ENV)."""
    return cache() / "model-checks"


def _key(spec: ModelSpec) -> str | None:
    return _key_of(repr(spec)) if spec.model in REGISTRY_NAMES else None


@functools.cache  # a plan asks once per stale cell
def _key_of(spec: str) -> str:
    text = "\0".join([spec, source_hash(), torch_version(), sys.version])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def known(spec: ModelSpec) -> bool:
    """Whether `spec` passed the check before (same spec, library source, torch, Python)."""
    key = _key(spec)
    return key is not None and (folder() / key).exists()


def passed(spec: ModelSpec) -> None:
    """`spec` passed the check in this process (remembered by `remember`)."""
    key = _key(spec)
    if key is not None:
        _found[key] = ""


def stacks(spec: ModelSpec) -> bool | None:
    """Whether copies of `spec` stack in a vmap, as a probe found before; None: not known."""
    key = _key(spec)
    if key is None:
        return None
    name = f"{key}.stacks"
    if name not in _found:
        try:
            return {"1": True, "0": False}.get((folder() / name).read_text())
        except OSError:
            return None
    return _found[name] == "1"


def note_stacks(spec: ModelSpec, value: bool) -> None:
    """A probe in this process found whether `spec` stacks (remembered by `remember`)."""
    key = _key(spec)
    if key is not None:
        _found[f"{key}.stacks"] = "1" if value else "0"


def remember() -> None:
    """Write this process's passes (a run that executes jobs); a cache that cannot be written
    costs only the check next time."""
    try:
        folder().mkdir(parents=True, exist_ok=True)
        for name, content in _found.items():
            (folder() / name).write_text(content)
    except OSError:
        pass
