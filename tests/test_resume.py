"""A training killed with SIGKILL resumes from its last checkpoint and ends exactly where an
uninterrupted run ends (CPU); a checkpoint written for other data, another model or other
settings is discarded with one line saying why, and the training starts from scratch."""

import glob
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import standin  # noqa: F401 -- registers the stand-in device
import torch

from nadpipe.backend import ENV, Backend
from nadpipe.grid import TrainJob
from nadpipe.io import load_torch
from nadpipe.runner import batches
from nadpipe.settings import ModelSpec, Shape, TrainSettings
from nadpipe.studies import DataSpec
from nadpipe.train import stackable

JOB = """
import pickle, sys
from nadpipe.jobs import train_job
train_job(*pickle.load(open(sys.argv[1], "rb")))
"""
# the same on the stand-in accelerator (tests/standin.py), registered before the job reads its
# backend
JOB_STANDIN = f"""
import pickle, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from standin import standin
from nadpipe.jobs import train_job
with standin():
    train_job(*pickle.load(open(sys.argv[1], "rb")))
"""
SHAPE = Shape(1, 32, 32)


def _job(model, seeds, epochs, sigma=1.0, kwargs=None, variant="f0_0"):
    """A fourier-study training (D(the constant image): no NADs needed) of `seeds`."""
    data = tuple(
        DataSpec(
            "fourier",
            variant,
            s,
            SHAPE,
            (("eps", 1.0), ("sigma", sigma), ("n_train", 3000), ("n_test", 10)),
        )
        for s in seeds
    )
    return TrainJob(
        "fourier",
        "net",
        variant,
        tuple(seeds),
        ModelSpec(model, kwargs or {}, SHAPE, 2),
        TrainSettings(epochs=epochs, lr_max=0.05),
        data,
        None,
        ("net", "fourier", variant),
    )


def _outs(tmp_path, run, n):
    out = tmp_path / run
    out.mkdir(exist_ok=True)
    return [str(out / f"m{k}.pt") for k in range(n)], [str(out / f"m{k}.json") for k in range(n)]


def _start(tmp_path, job, outs, backend=None):
    args = tmp_path / f"args_{time.monotonic_ns()}.pkl"
    args.write_bytes(pickle.dumps((job, None, *outs)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if backend is not None:  # as the Snakefile hands the gpus block to its jobs
        env[ENV] = backend.to_env()
    code = JOB_STANDIN if backend is not None and backend.device == "standin" else JOB
    return subprocess.Popen(
        [sys.executable, "-c", code, str(args)],
        cwd=Path(outs[0][0]).parent,  # a batch's manifest, lock and checkpoint: .nadpipe/ there
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run(tmp_path, job, outs, backend=None):
    proc = _start(tmp_path, job, outs, backend)
    out, _ = proc.communicate()
    assert proc.returncode == 0, out
    return out


def _epochs_done(ckpt):
    return load_torch(ckpt)["done"] if os.path.exists(ckpt) else 0


def _batch_checkpoint(outs) -> str:
    found = glob.glob(os.path.join(os.path.dirname(outs[0][0]), batches.ROOT, "*.ckpt"))
    return found[0] if found else ""


def _kill_mid_training(tmp_path, job, outs, backend=None):
    ckpt = outs[0][0] + ".ckpt"
    ckpt = ckpt if len(outs[0]) == 1 or job.model.model != "resnet18" else ckpt + ".0"
    batched = backend is not None and (backend.batch_cells or 1) > 1
    proc = _start(tmp_path, job, outs, backend)
    deadline = time.time() + 120
    while batched and not _batch_checkpoint(outs) and time.time() < deadline:
        time.sleep(0.02)
    ckpt = _batch_checkpoint(outs) if batched else ckpt
    while _epochs_done(ckpt) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    done = _epochs_done(ckpt)
    assert 3 <= done < job.train.epochs, "the kill must land mid-training"
    assert not os.path.exists(outs[0][0])
    return ckpt


def _same_results(a, b):
    for wa, wb in zip(a[0], b[0], strict=True):
        sa, sb = load_torch(wa), load_torch(wb)
        for name in sa:
            assert torch.equal(sa[name], sb[name]), name
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    for ra, rb in zip(a[1], b[1], strict=True):
        assert drop(json.load(open(ra))["history"]) == drop(json.load(open(rb))["history"])


CUDA = Backend(device="cuda", deterministic=True)
BATCHED = Backend(device="cpu", batch_cells=2)
STANDIN = Backend(device="standin", batch_cells=2)


def _sibling(job, outs):
    """A manifest of `job`'s batch with one stale sibling cell (another variant), in the run's
    directory, as the workflow writes it: the job leads a batch of two stacked models."""
    other = _job(job.model.model, list(job.seeds), job.train.epochs, variant="f1_1")
    here = os.path.dirname(outs[0][0])
    entries = [(job, outs[0][0], outs[1][0]), (other, f"{here}/sib.pt", f"{here}/sib.json")]
    chunks = batches.plan(entries, 2, stackable)
    batches.write_manifests(entries, chunks, root=os.path.join(here, batches.ROOT))


@pytest.mark.parametrize(
    ("model", "seeds", "backend"),
    [
        ("lenet", [0], None),
        ("mlp", [0, 1], None),
        # on the GPU with gpus.deterministic; VGG-11's dropout draws from the CUDA generator,
        # which the checkpoint carries
        pytest.param("lenet", [0], CUDA, marks=pytest.mark.gpu, id="lenet-cuda"),
        pytest.param("vgg11", [0], CUDA, marks=pytest.mark.gpu, id="vgg11-cuda"),
        pytest.param("mlp", [0, 1], CUDA, marks=pytest.mark.gpu, id="mlp-seeds-cuda"),
        # a batch of two cells (b879b52: no test resumed one), on the CPU and on the stand-in
        pytest.param("mlp", [0], BATCHED, id="mlp-batched"),
        pytest.param("mlp", [0], STANDIN, id="mlp-batched-standin"),
        pytest.param(
            "lenet",
            [0],
            Backend(device="cuda", deterministic=True, batch_cells=2),
            marks=pytest.mark.gpu,
            id="lenet-batched-cuda",
        ),  # fmt: skip
    ],
)
def test_killed_training_resumes_and_equals_an_uninterrupted_run(tmp_path, model, seeds, backend):
    batched = backend is not None and backend.batch_cells
    job = _job(model, seeds, 10 if batched else 25)  # a batch: two models, ten epochs
    whole, killed = _outs(tmp_path, "whole", len(seeds)), _outs(tmp_path, "killed", len(seeds))
    if batched:
        for outs in (whole, killed):
            _sibling(job, outs)
    _run(tmp_path, job, whole, backend)
    ckpt = _kill_mid_training(tmp_path, job, killed, backend)
    out = _run(tmp_path, job, killed, backend)
    assert "resuming from" in out
    if backend is not None and backend.device != "cpu":
        assert json.load(open(killed[1][0]))["device"] != "cpu"
    if backend is not None and backend.batch_cells:
        assert json.load(open(killed[1][0]))["trained_together"] == 2
    assert not os.path.exists(ckpt)  # removed once the outputs were written
    _same_results(whole, killed)


@pytest.mark.parametrize("seeds", [[0], [0, 1]], ids=["one model", "seed ensemble"])
def test_a_checkpoint_for_other_data_is_discarded(tmp_path, seeds):
    # interrupt a real training, change sigma, run again: the result is a clean run's with the
    # new sigma, not a run resumed on the old data
    killed = _outs(tmp_path, "killed", len(seeds))
    _kill_mid_training(tmp_path, _job("mlp", seeds, 25, sigma=1.0), killed)
    changed = _job("mlp", seeds, 25, sigma=2.0)
    out = _run(tmp_path, changed, killed)
    assert "discarding checkpoint" in out and "written for other data" in out
    assert "resuming" not in out
    clean = _outs(tmp_path, "clean", len(seeds))
    _run(tmp_path, changed, clean)
    _same_results(clean, killed)


def test_a_checkpoint_for_another_model_is_discarded_without_error(tmp_path):
    # change an MLP's hidden width: no size mismatch, a clean retrain
    killed = _outs(tmp_path, "killed", 1)
    _kill_mid_training(tmp_path, _job("mlp", [0], 25, kwargs={"hidden": [64]}), killed)
    wider = _job("mlp", [0], 25, kwargs={"hidden": [96]})
    out = _run(tmp_path, wider, killed)
    assert "discarding checkpoint" in out and "written for other model" in out
    clean = _outs(tmp_path, "clean", 1)
    _run(tmp_path, wider, clean)
    _same_results(clean, killed)


def test_a_checkpoint_of_other_settings_or_format_is_ignored(tmp_path):
    outs = _outs(tmp_path, "a", 1)
    torch.save({"settings": {"epochs": 99}, "seed": 0, "history": []}, outs[0][0] + ".ckpt")
    out = _run(tmp_path, _job("mlp", [0], 3), outs)
    assert "discarding checkpoint" in out
    assert len(json.load(open(outs[1][0]))["history"]) == 3
