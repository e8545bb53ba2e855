"""The GPU slot pool: real processes and real file locks, with fake GPUs on a CPU machine."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nadpipe.runner import slots

JOB = """
import json, os, random, sys, time
from nadpipe.runner.slots import gpu_slot
with gpu_slot(sys.argv[1].split(","), sys.argv[2], poll=0.02) as device:
    start = time.time()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == device
    time.sleep(random.uniform(0.05, 0.3))
    print(json.dumps({"device": device, "start": start, "end": time.time()}))
"""


def run_jobs(n_jobs, pool, lock_dir, env=None):
    env = {k: v for k, v in (env or os.environ).items()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", JOB, ",".join(pool), str(lock_dir)],
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
    records = run_jobs(16, ["0", "1", "2"], tmp_path, env)
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
        "import time\nfrom nadpipe.runner.slots import gpu_slot\n"
        f"with gpu_slot(['0'], {str(tmp_path)!r}):\n"
        "    print('held', flush=True)\n    time.sleep(60)"
    )
    holder = subprocess.Popen(  # what the slot says goes to stderr, as every job's words do
        [sys.executable, "-c", hold], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env,
    )  # fmt: skip
    assert "GPU slot 0: CUDA_VISIBLE_DEVICES=0" in holder.stdout.readline()
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(subprocess.TimeoutExpired):  # the only slot is taken: a job waits
        subprocess.run([sys.executable, "-c", JOB, "0", str(tmp_path)], env=env, timeout=3)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start = time.time()
    (record,) = run_jobs(1, ["0"], tmp_path, env)
    assert record["device"] == "0" and time.time() - start < 10


def test_a_cuda_visible_devices_already_set_is_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # as SLURM sets it
    with slots.gpu_slot(["0", "1"], str(tmp_path)) as device:
        assert device == "5" and os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert not list(tmp_path.iterdir())  # no pool, no lock files
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # several: the pool is made of them
    assert slots.visible_gpus() == ["2", "3"]
    with slots.gpu_slot(slots.pool(4, slots.visible_gpus()), str(tmp_path)) as device:
        assert device == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # restored
    records = run_jobs(6, ["2", "3", "2", "3"], tmp_path, dict(os.environ))
    assert {r["device"] for r in records} == {"2", "3"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with slots.gpu_slot([], str(tmp_path)) as device:  # no pool (CPU machine)
        assert device is None and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_slots_fall_round_robin_on_the_gpus_that_exist():
    # --resources gpu=4 on one GPU: four jobs share GPU 0 (at 820f241: slots 0..3, three of
    # them naming GPUs that do not exist)
    assert slots.pool(slots.slot_count(None, 4, 1), ["0"]) == ["0", "0", "0", "0"]
    assert slots.pool(5, ["0", "1"]) == ["0", "1", "0", "1", "0"]
    for n in range(9):
        for gpus in (["0"], ["0", "1"], ["3", "5", "6"]):
            assert set(slots.pool(n, gpus)) <= set(gpus)  # never a GPU that does not exist
    assert slots.describe(["0", "1", "0", "1"]) == (
        "4 GPU job slot(s) on 2 GPU(s) (GPU 0: 2 job(s), GPU 1: 2 job(s))"
    )


def test_pool_size_comes_from_config_then_resource_then_gpus_times_jobs_per_gpu():
    assert slots.slot_count(2, 4, 8) == 2
    assert slots.slot_count(None, 4, 8) == 4
    assert slots.slot_count(None, None, 8) == 8
    assert slots.slot_count(None, None, 2, jobs_per_gpu=4) == 8
    assert slots.slot_count(None, 4, 0) == slots.slot_count(3, None, 0) == 0  # no GPU: no pool
    # huge counts (--resources gpu=10**9) are capped at MAX_PER_GPU a GPU, not built as a list
    assert slots.slot_count(None, 10**9, 2) == slots.slot_count(10**9, None, 2) == 2 * 256
    assert len(slots.pool(slots.slot_count(None, 10**9, 1), ["0"])) == 256
    if not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/kfd"):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        code = "from nadpipe.runner.slots import visible_gpus; import sys; print(visible_gpus(), "
        code += "'torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == "[] False"  # no GPU driver: no pool, without torch
