"""A training killed with SIGKILL and started again resumes from its last checkpoint and ends
exactly where an uninterrupted run ends (CPU)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from nadpipe.data import PairSpec, write_pair_spec
from nadpipe.io import load_torch

JOB = """
import sys, json
from nadpipe.jobs import train_pair_job
args = json.loads(sys.argv[1])
train_pair_job(**args)
"""


def _specs(tmp_path, seeds):
    v = torch.full((1024,), 1 / 32.0)
    paths = []
    for s in seeds:
        path = str(tmp_path / f"data_s{s}.pt")
        meta = {"arch": "net", "nad_i": 0, "nad_j": 0, "seed": s}
        write_pair_spec(PairSpec(v, v, 1.0, 0.5, 1.0, 3000, 10, seed=s), path, meta)
        paths.append(path)
    return paths


def _args(tmp_path, run, datasets, model, epochs):
    out = tmp_path / run
    out.mkdir(exist_ok=True)
    n = len(datasets)
    return {
        "datasets": datasets,
        "model_outs": [str(out / f"m{k}.pt") for k in range(n)],
        "metrics_outs": [str(out / f"m{k}.json") for k in range(n)],
        "model": model,
        "kwargs": {},
        "train": {"epochs": epochs, "lr_max": 0.05},
    }


def _start(args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", JOB, json.dumps(args)]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _epochs_done(ckpt):
    if not os.path.exists(ckpt):
        return 0
    return load_torch(ckpt)["done"]


@pytest.mark.parametrize(("model", "seeds"), [("lenet", [0]), ("mlp", [0, 1])])
def test_killed_training_resumes_and_equals_an_uninterrupted_run(tmp_path, model, seeds):
    datasets = _specs(tmp_path, seeds)
    epochs = 25
    whole = _args(tmp_path, "whole", datasets, model, epochs)
    assert _start(whole).wait() == 0
    killed = _args(tmp_path, "killed", datasets, model, epochs)
    ckpt = killed["model_outs"][0] + ".ckpt"
    proc = _start(killed)
    deadline = time.time() + 120
    while _epochs_done(ckpt) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    done = _epochs_done(ckpt)
    assert 3 <= done < epochs, "the kill must land mid-training"
    assert not os.path.exists(killed["model_outs"][0])
    again = _start(killed)
    _, err = again.communicate()
    assert again.returncode == 0, err
    assert not os.path.exists(ckpt)  # removed once the outputs were written
    for k in range(len(seeds)):
        a, b = load_torch(whole["model_outs"][k]), load_torch(killed["model_outs"][k])
        for name in a:
            assert torch.equal(a[name], b[name]), name
        ha = json.load(open(whole["metrics_outs"][k]))["history"]
        hb = json.load(open(killed["metrics_outs"][k]))["history"]
        drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
        assert drop(ha) == drop(hb)


def test_a_checkpoint_of_other_settings_is_ignored(tmp_path):
    datasets = _specs(tmp_path, [0])
    args = _args(tmp_path, "a", datasets, "mlp", 3)
    ckpt = args["model_outs"][0] + ".ckpt"
    torch.save({"settings": {"epochs": 99}, "seed": 0, "history": []}, ckpt)
    proc = _start(args)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert len(json.load(open(args["metrics_outs"][0]))["history"]) == 3
