"""One GPU per job on a multi-GPU machine: a pool of slots held with file locks.

Snakemake's `--resources gpu=N` bounds how many GPU jobs run at once but does not tell a job
which GPU to take. Each GPU job therefore takes a slot: a non-blocking `flock` on one of N lock
files, tried in order, held for the job's lifetime, and sets `CUDA_VISIBLE_DEVICES` to that slot's
device before CUDA initialises. The kernel drops the lock when the process ends, however it
ends (SIGKILL included), so a dead job never keeps a GPU. A `CUDA_VISIBLE_DEVICES` that is
already set (SLURM sets it per job) is honoured: one device is used as it is; several become
the pool.

The Snakefile passes the pool to jobs through the environment (`NADPIPE_GPU_SLOTS`,
`NADPIPE_GPU_LOCK_DIR`), not through params, so a different `--resources gpu=N` reruns nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

SLOTS_ENV = "NADPIPE_GPU_SLOTS"
LOCK_DIR_ENV = "NADPIPE_GPU_LOCK_DIR"
DEFAULT_LOCK_DIR = ".nadpipe/gpu_slots"


def slot_count(configured: int | None, resource: object, visible_gpus: int | None = None) -> int:
    """The pool size: `gpus.slots` when set, else the `gpu` resource of the command line
    (`--resources gpu=N`), else the number of visible GPUs (0 on a CPU machine: no pool;
    counted with torch only when needed)."""
    if configured is not None:
        return configured
    value = getattr(resource, "value", resource)  # Snakemake 9 wraps resources
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if visible_gpus is None:
        visible_gpus = _visible_gpus()
    return visible_gpus


def _visible_gpus() -> int:
    """GPUs torch would see; without a GPU driver (NVIDIA's or ROCm's) 0, without importing
    torch (seconds, at every start of the workflow)."""
    if not (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/kfd")):
        return 0
    import torch

    return torch.cuda.device_count()


def _devices(n_slots: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(k) for k in range(n_slots)]
    return [d.strip() for d in visible.split(",") if d.strip()]


@contextlib.contextmanager
def gpu_slot(
    n_slots: int | None = None, lock_dir: str | None = None, poll: float = 0.5
) -> Iterator[str | None]:
    """Hold one GPU slot for the duration of the block; yield its device id (None: no pool).

    `n_slots` and `lock_dir` default to the environment the Snakefile sets. With every slot
    taken (more GPU jobs than slots, e.g. no `--resources gpu=N` given), wait for one.
    """
    if n_slots is None:
        n_slots = int(os.environ.get(SLOTS_ENV, "0") or 0)
    lock_dir = lock_dir or os.environ.get(LOCK_DIR_ENV, DEFAULT_LOCK_DIR)
    devices = _devices(n_slots)
    if "CUDA_VISIBLE_DEVICES" in os.environ and len(devices) <= 1:
        yield devices[0] if devices else None  # set by SLURM or the user: use it as it is
        return
    if not devices:
        yield None
        return
    os.makedirs(lock_dir, exist_ok=True)
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    waited = False
    while True:
        for device in devices:
            f = open(os.path.join(lock_dir, f"gpu{device}.lock"), "a+")  # noqa: SIM115
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = device
            print(f"GPU slot: CUDA_VISIBLE_DEVICES={device} ({len(devices)} slots)", flush=True)
            try:
                yield device
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
                if before is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = before
            return
        if not waited:
            print(f"all {len(devices)} GPU slots are taken; waiting for one", flush=True)
            waited = True
        time.sleep(poll)
