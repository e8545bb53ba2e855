"""Shared plumbing: derived seeds, atomic writes, job logging and device choice."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any tuple of printable parts, stable across runs and platforms.

    Each random stream gets its own tuple (e.g. ("data", i, j, seed)), so streams never share
    draws and adding a grid cell never changes another cell's numbers.
    """
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def generator(*parts: object) -> torch.Generator:
    """A CPU generator seeded with `derive_seed(*parts)`."""
    return torch.Generator().manual_seed(derive_seed(*parts))


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)`, then rename to `path`, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    def write(tmp: str) -> None:
        # through a file object: torch.save names the archive after a path's file name, which
        # here is a random temporary one, and the same object would give different bytes
        with open(tmp, "wb") as f:
            torch.save(obj, f)

    atomic_write(path, write)


class ArtifactError(RuntimeError):
    """An artifact is missing, truncated or corrupt; the message says how to rebuild it."""


def read_artifact(path: str | os.PathLike, reader: Callable[[str], Any]) -> Any:
    """`reader(path)`, turning any failure into an `ArtifactError` naming the file and the
    command that rebuilds it."""
    try:
        return reader(str(path))
    except Exception as e:  # a corrupt file can fail in any of the readers' layers
        raise ArtifactError(
            f"{path} cannot be read ({type(e).__name__}: {e}); it is truncated or corrupt. "
            f"Rebuild it with: snakemake --cores all --force {path}"
        ) from e


def load_torch(path: str | os.PathLike) -> Any:
    return read_artifact(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))


def load_json(path: str | os.PathLike) -> Any:
    def read(p: str) -> Any:
        with open(p) as f:
            return json.load(f)

    return read_artifact(path, read)


def load_parquet(path: str | os.PathLike):  # -> pandas.DataFrame (pandas imported lazily)
    import pandas as pd

    return read_artifact(path, pd.read_parquet)


def save_json(obj: Any, path: str | os.PathLike) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")

    atomic_write(path, write)


CUDNN_BENCHMARK_ENV = "NADPIPE_CUDNN_BENCHMARK"
REPO_ENV = "NADPIPE_REPO"  # the checkout, for the conda post-deploy script


def pick_device() -> torch.device:
    """CUDA when present, else CPU. On CUDA, cuDNN picks the fastest convolution algorithms
    (`gpus.cudnn_benchmark`, on unless the Snakefile sets NADPIPE_CUDNN_BENCHMARK=0)."""
    if torch.cuda.is_available():
        torch.backends.cudnn.benchmark = os.environ.get(CUDNN_BENCHMARK_ENV, "1") != "0"
        return torch.device("cuda")
    return torch.device("cpu")


def run_facts() -> dict:
    """Where a job ran: host, SLURM job id (empty outside SLURM), the GPU it was given."""
    import platform

    return {
        "host": platform.node(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


@contextlib.contextmanager
def job_log(
    path: str | os.PathLike | None, threads: int | None = None, gpu: int = 0
) -> Iterator[None]:
    """Send stdout and stderr (tqdm included) to a job's log file; set torch's CPU threads;
    with `gpu` > 0 hold a GPU slot (nadpipe.slots) for the job's lifetime."""
    from .slots import gpu_slot

    if threads:
        torch.set_num_threads(threads)
    slot = gpu_slot() if gpu else contextlib.nullcontext()
    if path is None:
        with slot:
            yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", buffering=1) as log:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                with slot:
                    yield
            except BaseException:
                import traceback

                traceback.print_exc(file=log)
                raise
