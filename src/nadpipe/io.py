"""Shared plumbing: derived seeds, atomic writes, artifact reading, job logs and progress.

torch is imported inside the functions that need it, so that the jobs that only read tables and
draw figures start without it (about 2 s on a 2-core machine).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .log import warn


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any tuple of printable parts, stable across runs and platforms.

    Each random stream gets its own tuple (e.g. ("data", i, j, seed)), so streams never share
    draws and adding a grid cell never changes another cell's numbers.
    """
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (hex); "missing" when there is no such file (the config check
    names the key that points to it)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return "missing"
    return h.hexdigest()


def generator(*parts: object):  # -> torch.Generator
    """A CPU generator seeded with `derive_seed(*parts)`."""
    # deferred: it loads torch, which importing io does not
    import torch

    return torch.Generator().manual_seed(derive_seed(*parts))


def _new_file_mode() -> int:
    """The mode a new file gets under this process's umask (0o644 under 022)."""
    mask = os.umask(0o022)  # reading the umask means setting it; it is put back at once
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)`, then rename to `path`, so readers never see a half-written file.
    The file gets the mode the umask gives any new file (mkstemp's own is 0600: a collaborator
    could not read the results)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _new_file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """Write `obj` with torch.save, every tensor in it on the CPU first (nadpipe.backend: what a
    job writes loads on a machine without its GPU, with a plain torch.load)."""
    # deferred: it loads torch, which importing io does not
    import torch
    from torch.utils._pytree import tree_map

    obj = tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, obj)

    def write(tmp: str) -> None:
        # through a file object: torch.save names the archive after a path's file name, which
        # here is a random temporary one, and the same object would give different bytes
        with open(tmp, "wb") as f:
            torch.save(obj, f)

    atomic_write(path, write)


def save_json(obj: Any, path: str | os.PathLike) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")

    atomic_write(path, write)


def save_text(text: str, path: str | os.PathLike) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


# What a run's jobs need of it, in one variable (JSON), set by nadpipe.runner.command.Command while
# Snakemake parses: "options" (the options that say which run this is, runner.lifecycle), "backend"
# (nadpipe.backend), "slots" and "lock_dir" (runner.slots), "study_modules", "repo" (the
# checkout, for the conda post-deploy script), "batches" (the file of this run's batches).
# Through the environment, not params, so that none of them reruns a job when it changes.
RUN_ENV = "NADPIPE_RUN"


def run_values() -> dict:
    """This run's values for its jobs (empty outside a workflow run). A value that is none of a
    run's (set by hand, cut short) is said once, naming the variable, and ignored."""
    text = os.environ.get(RUN_ENV) or "{}"
    try:
        values = json.loads(text)
    except ValueError:
        values = None
    if isinstance(values, dict):
        return values
    if text not in _SAID:
        _SAID.add(text)
        warn(f"the environment variable {RUN_ENV} holds {text[:40]!r}, none of a run's values "
             "(nadpipe sets it for its jobs; unset it): ignored")  # fmt: skip
    return {}


_SAID: set[str] = set()


def forget_run_values() -> None:
    """A run's main process starts from no values: whatever an earlier run or a shell left in
    the environment is not this run's."""
    os.environ.pop(RUN_ENV, None)


def set_run_values(**values) -> None:
    """Add these to this run's values, for this process and the jobs it starts."""
    os.environ[RUN_ENV] = json.dumps({**run_values(), **values}, sort_keys=True)


CACHE_ENV = "NADPIPE_CACHE"


def cache() -> Path:
    """nadpipe's cache on this machine: $NADPIPE_CACHE (CACHE_ENV), else
    $XDG_CACHE_HOME/nadpipe, else ~/.cache/nadpipe (the model checks that passed,
    nadpipe.verdicts; the models' measured costs, nadpipe.cost)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nadpipe"


def in_workflow() -> bool:
    """Whether this process is a job of a workflow run (else: the `nadpipe` command, Python)."""
    return "options" in run_values()


def program(name: str, argv0: str) -> list[str]:
    """How to type the program `name` that a process started as `argv0` (its sys.argv[0]) again,
    in the shell that started it: its bare name where PATH finds that same program; `python -m
    name` (the interpreter by path unless PATH finds the same) where it was started so; else
    the path as typed (a virtual environment not on PATH: `.venv/bin/snakemake`)."""

    if os.path.basename(argv0) == "__main__.py":
        python = os.path.basename(sys.executable)
        found = shutil.which(python)
        # not realpath: a virtual environment's python is a link to the system's
        same = found and os.path.abspath(found) == os.path.abspath(sys.executable)
        return [python if same else sys.executable, "-m", name]
    if os.sep not in argv0:
        return [argv0]
    found = shutil.which(os.path.basename(argv0))
    if os.path.isabs(argv0) and found and os.path.realpath(found) == os.path.realpath(argv0):
        return [os.path.basename(argv0)]
    return [argv0]


def beside(name: str) -> list[str]:
    """How to type the program `name` installed beside the one this process runs as (the
    `snakemake` of the `nadpipe` that runs: `program`); `name` when there is none."""
    folder = os.path.dirname(sys.argv[0])
    path = os.path.join(folder, name)
    return program(name, path) if folder and os.access(path, os.X_OK) else [name]


def snakemake_command(*args: str) -> str:
    """A Snakemake command line for the run this job belongs to: the program it was started by
    (`program`), the options that say which run it is (Snakefile, directory, config files and
    overrides, profiles; nadpipe.runner.lifecycle.run_options), then `args`, quoted for a shell."""

    values = run_values()
    words = [*values.get("program", ["snakemake"]), *values.get("options", [])]
    return shlex.join([*words, *map(str, args)])


def rebuild_command(path: str | os.PathLike) -> str:
    """The command that rebuilds `path` and everything made from it (one command: --forcerun
    reruns the job and all jobs downstream of it that the run needs)."""
    return snakemake_command("--cores", "all", "--forcerun", str(path))


class ArtifactError(RuntimeError):
    """An artifact is missing, truncated, corrupt or made for other settings; the message says
    how to rebuild it (in a workflow run) or what it is (elsewhere)."""


def read_artifact(path: str | os.PathLike, reader: Callable[[str], Any], hint: bool = True) -> Any:
    """`reader(path)`, turning any failure into an `ArtifactError` naming the file and, in a
    workflow run where `hint`, the command that rebuilds it."""
    hint_of = _rebuild_hint if hint else lambda _: ""
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
        raise ArtifactError(f"{path} {what}" + hint_of(path))
    try:
        return reader(str(path))
    except Exception as e:  # a corrupt file can fail in any of the readers' layers
        first = (str(e).strip().splitlines() or [""])[0][:160]  # torch's can run to a page
        raise ArtifactError(
            f"{path} cannot be read ({type(e).__name__}: {first}); it is truncated or corrupt, "
            f"or not a file of this kind" + hint_of(path)
        ) from e


def _rebuild_hint(path) -> str:
    return f". Rebuild it with: {rebuild_command(path)}" if in_workflow() else ""


def load_torch(path: str | os.PathLike) -> Any:
    # deferred: it loads torch, which importing io does not
    import torch

    return read_artifact(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))


def save_claimed(value: Any, claim: dict, path: str | os.PathLike) -> None:
    """Write `value` with what it claims to be (`claim`: the key of the job that made it, its
    range, ...), for `load_claimed` to check before anything uses it."""
    save_torch({"claim": claim, "value": value}, path)


def differs(said: dict, claim: dict) -> list[str]:
    """What a file says it is (`said`) against what it should be (`claim`), key by key, in
    words ("arch 'lenet', not 'mlp'"); [] when they agree."""
    return [f"{k} {said.get(k)!r}, not {v!r}" for k, v in claim.items() if said.get(k) != v]


def load_claimed(path: str | os.PathLike, claim: dict) -> Any:
    """The value `save_claimed` wrote at `path`, if it claims to be `claim`; else an
    ArtifactError that names the file and what differs (a file of another job, another range,
    or not one of these at all). Such files are a job's own, made again where they fail: the
    error names no command."""
    # deferred: it loads torch, which importing io does not
    import torch

    found = read_artifact(path, partial(torch.load, map_location="cpu", weights_only=True), False)
    said = found.get("claim") if isinstance(found, dict) else None
    if not isinstance(said, dict) or "value" not in found:
        raise ArtifactError(f"{path} holds no claim of what it is: not a file nadpipe wrote here")
    differ = differs(said, claim)
    if differ:
        raise ArtifactError(f"{path} is another's: its {'; '.join(differ)}")
    return found["value"]


def load_json(path: str | os.PathLike) -> Any:
    def read(p: str) -> Any:
        with open(p) as f:
            return json.load(f)

    return read_artifact(path, read)


def load_parquet(path: str | os.PathLike):  # -> pandas.DataFrame
    # deferred: it loads pandas, which importing io does not
    import pandas as pd

    return read_artifact(path, pd.read_parquet)


STUDIES_ENV = "NADPIPE_STUDIES"  # modules that register studies of their own, comma-separated


def keep(paths: list[str], kept: str, root: str) -> None:
    """Hard-link each file of `paths` (under the folder `root`) to the same relative path under
    `kept`, replacing what was there: the last good copy, at no cost in space, which outlives
    Snakemake deleting the outputs of a later job that fails
    (nadpipe.runner.lifecycle.restore_kept).
    A filesystem without hard links keeps nothing."""
    for path in paths:
        to = os.path.join(kept, os.path.relpath(path, root))
        os.makedirs(os.path.dirname(to), exist_ok=True)
        tmp = f"{to}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        try:
            os.link(path, tmp)
        except OSError:
            return
        os.replace(tmp, to)


def forget(paths: list[str], kept: str, root: str) -> None:
    """Remove what `keep` kept of `paths`: nothing of theirs is put back."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(kept, os.path.relpath(path, root)))
