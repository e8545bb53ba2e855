"""What made an artifact: the nadpipe version, a hash of the library source, the torch version;
and, at the start of a run, which results on disk other library source made.

Snakemake reruns a job when its script changes (its "code" trigger) but not when the library
the script calls changes. Every trained model's record, NAD artifact and result row therefore
carries the source hash, and the run lists what other source made and the command that
recomputes it; it never reruns by itself.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import importlib.util
import json
import os
import sys
from collections import defaultdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__
from .io import snakemake_command
from .paths import EVAL, MODEL, NAD, NAD_SHARD, pattern
from .settings import REGISTRY_NAMES

PACKAGE = Path(__file__).resolve().parent
KEYS = ("nadpipe_version", "nadpipe_source", "torch_version")


@functools.cache
def source_hash() -> str:
    """sha256 (first 16 hex digits) of the library's Python files, by relative path and bytes.
    (A study module of one's own is not the library: its code is part of its study's cells,
    nadpipe.grid.Plan.data_spec, as a user model's is part of its model's spec.)"""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def torch_version() -> str:
    try:
        return version("torch")
    except PackageNotFoundError:  # e.g. a conda build without pip metadata
        # deferred: it loads torch, which importing provenance does not
        import torch

        return str(torch.__version__)


def provenance() -> dict[str, str]:
    """{nadpipe_version, nadpipe_source, torch_version} of this process's library."""
    return {
        "nadpipe_version": __version__,
        "nadpipe_source": source_hash(),
        "torch_version": torch_version(),
    }


# -- results made by other library source ------------------------------------------------------

MAX_NAMED = 20  # stale results named one by one in the command that recomputes them
# rule of each artifact kind that carries provenance, and where it lies under results/
ARTIFACTS = {
    "nad_shard": pattern(NAD_SHARD) + ".json",
    "nads": pattern(NAD) + ".json",
    "train": pattern(MODEL) + ".json",
    "evaluate": pattern(EVAL) + ".parquet",
}


def _source_of(path: str) -> str | None:
    try:
        if path.endswith(".parquet"):
            # deferred: it loads pyarrow, which importing provenance does not
            import pyarrow.parquet as pq

            column = pq.read_table(path, columns=["nadpipe_source"]).column(0)
            return column[0].as_py() if len(column) else None
        with open(path) as f:
            return json.load(f).get("provenance", {}).get("nadpipe_source")
    except Exception:  # noqa: BLE001 -- unreadable or older: the job that reads it reports it
        return None


def stale(results: str = "results") -> dict[str, list[str]]:
    """Per rule, the artifacts in the results folder `results` whose provenance names other
    library source than this one (those without provenance count as other source: an older
    nadpipe made them), as paths like the rules' own (results/...)."""
    now = source_hash()
    out: dict[str, list[str]] = defaultdict(list)
    for rule, files in ARTIFACTS.items():
        for path in sorted(glob.glob(os.path.join(glob.escape(results), files))):
            if _source_of(path) != now:
                out[rule].append(path)
    return dict(out)


def stale_message(found: dict[str, list[str]]) -> str | None:
    """What to tell the user about `stale()`'s findings, with the command that recomputes them;
    None when there is nothing to say."""
    if not found:
        return None
    n = sum(map(len, found.values()))
    per = ", ".join(f"{len(v)} of rule {rule}" for rule, v in found.items())

    example = next(iter(found.values()))[0]
    files = [path for paths in found.values() for path in paths]
    # a few: exactly those and what was made from them; many: every job of their rules
    which = files if len(files) <= MAX_NAMED else list(found)
    command = snakemake_command("--cores", "all", "--forcerun", *which)
    return (
        f"{n} result(s) on disk were made by other nadpipe library source than this checkout's "
        f"({source_hash()}): {per} (e.g. {example}). Snakemake does not rerun them by itself "
        f"(it sees changes to the workflow scripts, not to the library). If the change matters "
        f"for them, recompute them and everything made from them with: {command}"
    )


# -- a user model's code, part of its spec (nadpipe.grid.Plan.model_spec) -------------------


def importable_here() -> str:
    """Put the working directory on the import path (a mynets.py beside the config, in the
    config check, the jobs and the source digest); returns it."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)
    return here


def _module_file(name: str, near: str | None = None) -> str | None:
    """The source file of module `name` (found, not imported), if it is a .py file; with
    `near`, only one in that directory (a module beside it, or a package there)."""
    if near is not None:
        top = name.split(".")[0]
        candidates = [os.path.join(near, f"{top}.py"), os.path.join(near, top, "__init__.py")]
        if not any(os.path.exists(c) for c in candidates):
            return None
    importable_here()
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return origin if origin and origin.endswith(".py") and os.path.exists(origin) else None


def _local_imports(path: str) -> set[str]:
    """Names of the modules `path` imports (absolute imports, and relative ones resolved in
    its directory)."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except (OSError, SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module)
            elif node.level:  # relative: files of this package's directory
                names |= {f"{node.module}" if node.module else a.name for a in node.names}
    return names


def source_digest(model: str) -> str:
    """sha256 (16 hex digits) of a user model's module file and of every module beside it that
    it imports, recursively ("" for a registry model, whose code is nadpipe's): part of the
    model's spec, so that editing the builder, or a layer it imports from the same directory,
    reruns the NADs and trainings of the architectures that use it."""
    if model in REGISTRY_NAMES or ":" not in model:
        return ""
    return module_digest(model.partition(":")[0])


def module_digest(module: str) -> str:
    """sha256 (16 hex digits) of the module `module`'s file and of every module beside it that
    it imports, recursively ("" when it is no .py file found on the import path)."""
    first = _module_file(module)
    if first is None:
        return ""
    digest, seen, todo = hashlib.sha256(), set(), [first]
    while todo:
        path = os.path.realpath(todo.pop())
        if path in seen:
            continue
        seen.add(path)
        folder = os.path.dirname(path)
        for name in sorted(_local_imports(path)):
            found = _module_file(name, near=folder)
            if found is not None:
                todo.append(found)
    for path in sorted(seen):
        digest.update(os.path.basename(path).encode() + b"\0" + open(path, "rb").read())
    return digest.hexdigest()[:16]
