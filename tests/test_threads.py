"""nadpipe's processes wait without spinning long and use the cores they may (nadpipe.threads):
set when nadpipe is imported, before torch; a user's own setting wins and is said."""

import os
import subprocess
import sys

import pytest

from nadpipe import threads

CODE = """
import os, nadpipe, torch
from nadpipe import threads
print(os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())
print(threads.said())
"""


def _run(env: dict, preexec=None) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    out = subprocess.run([sys.executable, "-c", CODE], env={**clean, **env}, capture_output=True,
                         text=True, check=True, preexec_fn=preexec)  # fmt: skip
    return out.stdout.splitlines()


def test_a_process_that_imports_nadpipe_waits_briefly_and_says_nothing():
    first, said = _run({})
    spin, threads_set, _ = first.split()
    assert spin == threads.SPIN and said == "None"
    assert threads_set == (
        "None" if threads.cores_here() == os.cpu_count() else str(os.cpu_count())
    )


def test_a_users_own_setting_wins_and_is_said():
    first, said = _run({"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "1"})
    assert first.split() == ["None", "1", "1"]
    assert said.startswith("OMP_WAIT_POLICY=ACTIVE, OMP_NUM_THREADS=1 from the environment")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two cores")  # fmt: skip
def test_a_process_pinned_to_one_core_runs_one_thread():
    # torch counts the machine's cores, not those a process may use (taskset, a container's
    # quota, a Slurm job): its threads would queue on the one core
    first, _ = _run({}, preexec=lambda: os.sched_setaffinity(0, {0}))
    assert first.split()[1:] == ["1", "1"]
