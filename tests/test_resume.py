"""A training killed with SIGKILL resumes from its last checkpoint and ends exactly where an
uninterrupted run ends (CPU); a checkpoint written for other data, another model or other
settings is discarded with one line saying why, and the training starts from scratch."""

import json
import os
from pathlib import Path

import pytest
import torch
from helpers import KILL_AFTER, kill_mid_epoch
from standin import require

from nadpipe.backend import Backend
from nadpipe.grid import TrainJob
from nadpipe.io import load_torch
from nadpipe.settings import ModelSpec, Shape, TrainSettings
from nadpipe.studies import DataSpec

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


def _epochs_done(ckpt):
    return load_torch(ckpt)["done"] if os.path.exists(ckpt) else 0


def _batch(job, outs):
    """`job` and a stale sibling cell (another variant) trained together by a batch's job into
    their ahead files beside `outs` (nadpipe.batching): (the call, the checkpoint, the ahead
    file of `job`)."""
    other = _job(job.model.model, list(job.seeds), job.train.epochs, variant="f1_1")
    here = os.path.dirname(outs[0][0])
    aheads = [f"{here}/m.ahead", f"{here}/sib.ahead"]
    checkpoint = f"{here}/batch.ckpt"
    return ("train_together_job", ([job, other], None, aheads, checkpoint)), checkpoint, aheads[0]


def _kill_mid_training(job, outs, backend=None):
    """Train `job` until it is killed mid-epoch; the checkpoint it leaves."""
    batched = backend is not None and (backend.batch_cells or 1) > 1
    call, ckpt, _ = _batch(job, outs) if batched else (None, outs[0][0] + ".ckpt", None)
    kill_mid_epoch(job, outs, Path(outs[0][0]).parent, backend, call)
    ckpt = ckpt if len(outs[0]) == 1 or job.model.model != "resnet18" else ckpt + ".0"
    assert _epochs_done(ckpt) == KILL_AFTER < job.train.epochs, "killed mid-training"
    return ckpt


def _train(train_here, job, outs, backend=None) -> str:
    """Train `job` to its outputs: alone, or (a backend that batches) with a sibling by a batch's
    job, then claimed by its own job. What they said."""
    here = Path(outs[0][0]).parent
    if backend is None or (backend.batch_cells or 1) <= 1:
        return train_here(job, outs, here, backend)
    call, _, ahead = _batch(job, outs)
    said = train_here(job, outs, here, backend, call)
    claim = ("train_job", (job, None, *outs, backend, 0, ahead, []))
    return said + train_here(job, outs, here, backend, claim)


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
STANDIN = "the stand-in, batched"  # a Backend where the stand-in is (standin.require)


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
def test_killed_training_resumes_and_equals_an_uninterrupted_run(
    tmp_path, train_here, model, seeds, backend
):
    if backend == STANDIN:
        require()
        backend = Backend(device="standin", batch_cells=2)
    job = _job(model, seeds, 6)  # killed in epoch 4 of 6; a batch: two models
    whole, killed = _outs(tmp_path, "whole", len(seeds)), _outs(tmp_path, "killed", len(seeds))
    _train(train_here, job, whole, backend)
    ckpt = _kill_mid_training(job, killed, backend)
    out = _train(train_here, job, killed, backend)
    assert "resuming from" in out
    if backend is not None and backend.device != "cpu":
        assert json.load(open(killed[1][0]))["device"] != "cpu"
    if backend is not None and backend.batch_cells:
        assert json.load(open(killed[1][0]))["trained_together"] == 2
    assert not os.path.exists(ckpt)  # removed once the outputs were written
    _same_results(whole, killed)


@pytest.mark.parametrize("seeds", [[0], [0, 1]], ids=["one model", "seed ensemble"])
def test_a_checkpoint_for_other_data_is_discarded(tmp_path, train_here, seeds):
    # interrupt a real training, change sigma, run again: the result is a clean run's with the
    # new sigma, not a run resumed on the old data
    killed = _outs(tmp_path, "killed", len(seeds))
    _kill_mid_training(_job("mlp", seeds, 6, sigma=1.0), killed)
    changed = _job("mlp", seeds, 6, sigma=2.0)
    out = _train(train_here, changed, killed)
    assert "discarding checkpoint" in out and "written for other data" in out
    assert "resuming" not in out
    clean = _outs(tmp_path, "clean", len(seeds))
    _train(train_here, changed, clean)
    _same_results(clean, killed)


def test_a_checkpoint_for_another_model_is_discarded_without_error(tmp_path, train_here):
    # change an MLP's hidden width: no size mismatch, a clean retrain
    killed = _outs(tmp_path, "killed", 1)
    _kill_mid_training(_job("mlp", [0], 6, kwargs={"hidden": [64]}), killed)
    wider = _job("mlp", [0], 6, kwargs={"hidden": [96]})
    out = _train(train_here, wider, killed)
    assert "discarding checkpoint" in out and "written for other model" in out
    clean = _outs(tmp_path, "clean", 1)
    _train(train_here, wider, clean)
    _same_results(clean, killed)


def test_a_checkpoint_of_other_settings_or_format_is_ignored(tmp_path, train_here):
    outs = _outs(tmp_path, "a", 1)
    torch.save({"settings": {"epochs": 99}, "seed": 0, "history": []}, outs[0][0] + ".ckpt")
    out = _train(train_here, _job("mlp", [0], 3), outs)
    assert "discarding checkpoint" in out
    assert len(json.load(open(outs[1][0]))["history"]) == 3
