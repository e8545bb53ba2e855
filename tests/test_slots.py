"""The GPU slot pool: real processes and real file locks, with a fake slot count on CPU."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nadpipe import slots

JOB = """
import json, os, random, sys, time
from nadpipe.slots import gpu_slot
with gpu_slot(int(sys.argv[1]), sys.argv[2], poll=0.02) as device:
    start = time.time()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == device
    time.sleep(random.uniform(0.05, 0.3))
    print(json.dumps({"device": device, "start": start, "end": time.time()}))
"""


def run_jobs(n_jobs, n_slots, lock_dir, env=None):
    env = {k: v for k, v in (env or os.environ).items()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", JOB, str(n_slots), str(lock_dir)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n_jobs)
    ]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_concurrent_jobs_never_share_a_slot(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    records = run_jobs(16, 3, tmp_path, env)
    assert {r["device"] for r in records} == {"0", "1", "2"}
    for device in ("0", "1", "2"):
        spans = sorted((r["start"], r["end"]) for r in records if r["device"] == device)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"two jobs held slot {device} at once"
    # and the pool was used in parallel: some moment had 3 jobs running
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running, peak = 0, 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 3


def test_a_killed_job_gives_its_slot_back(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    hold = (
        "import time\nfrom nadpipe.slots import gpu_slot\n"
        f"with gpu_slot(1, {str(tmp_path)!r}):\n    print('held', flush=True)\n    time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True, env=env
    )
    assert "CUDA_VISIBLE_DEVICES=0" in holder.stdout.readline()
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(subprocess.TimeoutExpired):  # the only slot is taken: a job waits
        subprocess.run([sys.executable, "-c", JOB, "1", str(tmp_path)], env=env, timeout=3)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start = time.time()
    (record,) = run_jobs(1, 1, tmp_path, env)
    assert record["device"] == "0" and time.time() - start < 10


def test_a_cuda_visible_devices_already_set_is_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # as SLURM sets it
    with slots.gpu_slot(4, str(tmp_path)) as device:
        assert device == "5" and os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert not list(tmp_path.iterdir())  # no pool, no lock files
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # several: they are the pool
    with slots.gpu_slot(4, str(tmp_path)) as device:
        assert device == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # restored
    records = run_jobs(6, 4, tmp_path, dict(os.environ))
    assert {r["device"] for r in records} == {"2", "3"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with slots.gpu_slot(0, str(tmp_path)) as device:  # no pool (CPU machine)
        assert device is None and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_pool_size_comes_from_config_then_resource_then_visible_gpus():
    assert slots.slot_count(2, 4, 8) == 2
    assert slots.slot_count(None, 4, 8) == 4
    assert slots.slot_count(None, None, 8) == 8
    assert slots.slot_count(None, None, 0) == 0
    if not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/kfd"):
        assert slots.slot_count(None, None) == 0  # no GPU driver: no pool, without torch
