"""How nadpipe's processes share the cores: torch's OpenMP threads wait without spinning long,
and are no more than the cores this process may use. Set once, when nadpipe is imported and
before torch is (libgomp reads its variables when it loads), so every process nadpipe starts
that runs torch (a job, the warm job server, a `nadpipe` command) has it. A leaf: it imports
nothing of nadpipe.

Why (benchmarks/neighbour.py, docs/speed.md): libgomp's threads spin for 300 000 rounds
waiting for work before they sleep. Beside other busy processes those rounds take the cores the
others need: `nadpipe nads` of 200 LeNets took 113 s and 74 CPU-s beside two PyTorch processes
on 2 cores, against 3.6 s and 5.4 CPU-s idle. With 1 000 rounds (libgomp's own figure when it
knows it has more threads than cores): 11.8 s and 5.9 CPU-s beside them, 3.6 s idle. Passive
waiting (no spin) is as good beside them but 25 % slower idle.

A user's own setting of any of these wins: nadpipe then sets none of them and says so.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

SPIN = "1000"  # GOMP_SPINCOUNT: rounds a waiting thread spins before it sleeps
OWN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")
GIVEN: list[str] = []  # what the user's environment set of OWN, for `said`


def cores_here() -> int:
    """The cores this process may use now: its CPU affinity, within its cgroup's CPU quota
    (a container's --cpus, a Slurm job's cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:  # cgroup v2: "max 100000" or "QUOTA PERIOD"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores or 1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores or 1)


def settle(env=None) -> None:
    """Set how torch's threads wait, and how many there are where this process may use fewer
    cores than the machine has, unless the environment says either already (then `said`).
    Nothing once torch is loaded: its OpenMP read the variables then."""
    env = os.environ if env is None else env
    if "torch" in sys.modules:
        return
    GIVEN[:] = [f"{k}={env[k]}" for k in OWN if k in env]
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = SPIN
    cores = cores_here()
    if "OMP_NUM_THREADS" not in env and cores < (os.cpu_count() or cores):
        env["OMP_NUM_THREADS"] = str(cores)


def said() -> str | None:
    """The user's own settings nadpipe left alone, in a line; None when there are none."""
    if not GIVEN:
        return None
    return (
        f"{', '.join(GIVEN)} from the environment: nadpipe leaves how torch's threads wait "
        "and how many there are to it (its own choice: docs/speed.md, a busy machine)"
    )
