"""GPU jobs sharing the GPUs of one machine: a pool of slots held with file locks.

Snakemake's `--resources gpu=N` bounds how many GPU jobs run at once but does not tell a job
which GPU to take. The Snakefile's main process therefore decides a pool once (`pool`): N slots
spread round robin over the GPUs that exist, so `--resources gpu=4` on one GPU is four jobs
sharing GPU 0, and no slot ever names a GPU that does not exist. Each GPU job takes a free slot
(a non-blocking `flock` on the slot's lock file, tried in order, held for the job's lifetime)
and sets `CUDA_VISIBLE_DEVICES` to that slot's GPU before CUDA initialises. The kernel drops the
lock when the process ends, however it ends (SIGKILL included), so a dead job never keeps a
slot. On a machine without a GPU there is no pool. A `CUDA_VISIBLE_DEVICES` already set in the
job (SLURM sets it per job) is honoured.

The Snakefile passes the pool to jobs through the environment (the run's one variable,
nadpipe.io.RUN_ENV: "slots", the GPU of each slot; "lock_dir"), not through params, so a
different `--resources gpu=N` reruns nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from ..io import run_values
from ..log import say

DEFAULT_LOCK_DIR = ".nadpipe/gpu_slots"


def visible_gpus() -> list[str]:
    """The ids of the GPUs a job of this machine can be given: CUDA_VISIBLE_DEVICES when set,
    else 0..n-1 for the n devices torch counts (none without a GPU driver, NVIDIA's or ROCm's;
    torch is then not imported, which takes seconds at every start of the workflow)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if not (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/kfd")):
        return []
    # deferred: it loads torch, which importing slots does not
    import torch

    return [str(k) for k in range(torch.cuda.device_count())]


MAX_PER_GPU = 256  # jobs sharing one GPU: beyond this they only wait (and a pool is a list)


def slot_count(configured: int | None, resource: object, gpus: int, jobs_per_gpu: int = 1) -> int:
    """How many GPU jobs run at once: `gpus.slots` when set, else the `gpu` resource of the
    command line (`--resources gpu=N`), else `gpus` x `jobs_per_gpu`; 0 without a GPU; at most
    MAX_PER_GPU per GPU (`--resources gpu=1000000000` would otherwise build that many slots)."""
    if gpus == 0:
        return 0
    if configured is not None:
        count = configured
    else:
        value = getattr(resource, "value", resource)  # Snakemake 9 wraps resources
        usable = isinstance(value, int) and not isinstance(value, bool) and value > 0
        count = value if usable else gpus * jobs_per_gpu
    return min(count, gpus * MAX_PER_GPU)


def pool(n_slots: int, gpus: list[str]) -> list[str]:
    """The GPU of each of `n_slots` slots, round robin over `gpus`."""
    return [gpus[k % len(gpus)] for k in range(n_slots)] if gpus else []


def describe(slots: list[str]) -> str:
    """One line for the start of a run: how the slots fall on the GPUs."""
    if not slots:
        return "no GPU: jobs run on the CPU"
    per = {g: slots.count(g) for g in dict.fromkeys(slots)}
    spread = ", ".join(f"GPU {g}: {n} job(s)" for g, n in per.items())
    return f"{len(slots)} GPU job slot(s) on {len(per)} GPU(s) ({spread})"


def _env_pool() -> list[str]:
    return list(run_values().get("slots", []))


def gpu_expected() -> bool:
    """Whether a GPU job of this run will find a GPU, known without starting CUDA: a slot pool
    (the Snakefile found GPUs) or a CUDA_VISIBLE_DEVICES naming one (SLURM's)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return bool(_env_pool()) or (given not in ("", "-1"))


@contextlib.contextmanager
def gpu_slot(
    slots: list[str] | None = None, lock_dir: str | None = None, poll: float = 0.5
) -> Iterator[str | None]:
    """Hold one GPU slot for the duration of the block; yield its GPU id (None: no pool).

    `slots` (the GPU of each slot) and `lock_dir` default to the environment the Snakefile
    sets. With every slot taken (more GPU jobs than slots), wait for one.
    """
    slots = _env_pool() if slots is None else slots
    lock_dir = lock_dir or run_values().get("lock_dir", DEFAULT_LOCK_DIR)
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None and len([d for d in given.split(",") if d.strip()]) <= 1:
        yield given.strip() or None  # set by SLURM or the user: use it as it is
        return
    if not slots:
        yield None
        return
    os.makedirs(lock_dir, exist_ok=True)
    waited = False
    while True:
        for k, gpu in enumerate(slots):
            f = open(os.path.join(lock_dir, f"slot{k}.lock"), "a+")  # noqa: SIM115
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            say(f"GPU slot {k}: CUDA_VISIBLE_DEVICES={gpu} ({describe(slots)})")
            try:
                yield gpu
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
                if given is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = given
            return
        if not waited:
            say(f"all {len(slots)} GPU slots are taken; waiting for one")
            waited = True
        time.sleep(poll)
