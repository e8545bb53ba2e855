"""Grid cells trained together (nadpipe.runner.batches): the first job of a batch trains its stale
siblings with it; each sibling's job then claims its result; the results equal training each
cell alone up to float rounding; a killed batch resumes."""

import json

import pytest
import torch
from conftest import SCHEMA
from helpers import KILL_AFTER, kill_mid_epoch

from nadpipe import config as nc
from nadpipe.backend import Backend
from nadpipe.grid import Plan
from nadpipe.io import load_torch
from nadpipe.jobs import train_job
from nadpipe.runner import batches
from nadpipe.train import stackable

CONFIG = {
    "nad_pairs": {"enabled": False},
    "fourier": {  # no NADs needed: four cells of one protocol
        "enabled": True,
        "architectures": ["mlp", "lenet"],
        "size": 2,
        "n_train": 600,
        "n_test": 200,
        # ten steps: the same computation up to float rounding. (Longer, on tasks at the edge
        # of what a model learns, rounding differences grow as in any two float-different runs:
        # momentum SGD there is chaotic.)
        "train": {"epochs": 1, "batch_size": 64},
    },
    "architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [32]}}},
}


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the manifests, locks and cache live under .nadpipe/
    p = Plan(nc.load_config(CONFIG, SCHEMA)[0])
    cells = p.train_cells()
    batches.write_manifests(cells, batches.plan(cells, 4, stackable))
    return p


def _train(plan, arch, variant, size, out):
    job = plan.train_job("fourier", arch, variant, (0,))
    model, record = str(out / f"{arch}_{variant}.pt"), str(out / f"{arch}_{variant}.json")
    said = train_job(job, None, [model], [record], Backend(device="cpu", batch_cells=size))
    return said, load_torch(model), json.load(open(record))


@pytest.mark.parametrize("arch", ["mlp", "lenet"])
def test_siblings_train_together_and_equal_cells_trained_alone(plan, tmp_path, arch):
    cells = [c.variant for c in plan.cells("fourier") if c.arch == arch]
    assert cells == ["f0_0", "f0_1", "f1_0", "f1_1"]
    alone = {v: _train(plan, arch, v, 1, tmp_path / "alone") for v in cells}
    assert all(r["trained_together"] == 1 for _, _, r in alone.values())
    out = tmp_path / "batched"
    said, first, record = _train(plan, arch, "f0_1", 4, out)  # the first job leads
    assert "trained with 3 sibling cell(s) in one batch" in said
    assert record["trained_together"] == 4
    cached = list((tmp_path / batches.CACHE).iterdir())
    assert len(cached) == 3  # the siblings' results wait for their own jobs
    results = {"f0_1": (said, first, record)}
    for v in cells:
        if v != "f0_1":
            results[v] = _train(plan, arch, v, 4, out)
            assert f"moved to {out / f'{arch}_{v}.pt'})" in results[v][0]  # claimed
        said, weights, record = results[v]
        ref = alone[v][1]
        for name in ref:  # one optimizer over stacked parameters = the members' side by side
            torch.testing.assert_close(weights[name], ref[name], rtol=1e-5, atol=1e-6)
        h = [x for e in record["history"] for x in (e["loss"], e["train_accuracy"])]
        h_alone = [x for e in alone[v][2]["history"] for x in (e["loss"], e["train_accuracy"])]
        assert h == pytest.approx(h_alone, rel=1e-4)
        assert (
            record["cell_key"]
            == alone[v][2]["cell_key"]
            == batches.cell_key(plan.train_job("fourier", arch, v, (0,)))
        )
    assert not list((tmp_path / batches.CACHE).iterdir())  # every result claimed


def test_only_stale_siblings_join_a_batch(plan, tmp_path):
    out = tmp_path / "r"
    for v in ("f0_0", "f1_1"):  # two cells done, and up to date, before the batch
        _train(plan, "lenet", v, 1, out)
    # the manifest names the workflow's paths; point them to where this test wrote
    key = batches.batch_key(plan.train_job("fourier", "lenet", "f0_0", (0,)))
    manifest = tmp_path / batches.ROOT / f"{key}.json"
    cells = json.loads(manifest.read_text())
    for cell in cells:
        v = cell["job"]["variant"]
        cell["model"], cell["record"] = str(out / f"lenet_{v}.pt"), str(out / f"lenet_{v}.json")
    manifest.write_text(json.dumps(cells))
    said, _, record = _train(plan, "lenet", "f0_1", 8, out)
    assert record["trained_together"] == 2  # f0_1 and f1_0; not the two up to date
    assert "trained with 1 sibling cell(s)" in said


def test_a_killed_batch_resumes_and_equals_an_uninterrupted_one(plan, tmp_path, train_here):
    job = plan.train_job("fourier", "mlp", "f0_0", (0,))
    job = type(job)(**{**job.__dict__, "train": type(job.train)(
        **{**job.train.__dict__, "epochs": 6})})  # fmt: skip
    backend = Backend(device="cpu", batch_cells=4)
    # the manifest lists the 1-epoch jobs: give this job's batch its own (one cell) manifest
    batches.write_manifests([(job, "m.pt", "m.json")])
    outs = {}
    for run in ("killed", "whole"):
        (tmp_path / run).mkdir()
        outs[run] = [str(tmp_path / run / "m.pt")], [str(tmp_path / run / "m.json")]
    kill_mid_epoch(job, outs["killed"], tmp_path, backend)
    # a batch of one trains alone: its checkpoint beside its model
    ckpts = lambda: list((tmp_path / "killed").glob("*.ckpt"))  # noqa: E731
    assert load_torch(ckpts()[0])["done"] == KILL_AFTER
    assert "resuming from" in train_here(job, outs["killed"], tmp_path, backend)
    assert not ckpts()  # removed once the outputs were written
    train_here(job, outs["whole"], tmp_path, backend)
    a, b = load_torch(tmp_path / "killed/m.pt"), load_torch(tmp_path / "whole/m.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_sibling_claims_its_result_holding_no_gpu_slot(plan, tmp_path, monkeypatch):
    # a one-slot pool whose only slot another GPU job holds: the leader trains (it takes the
    # slot when free), then a sibling's job claims its result without waiting for the slot
    # (b879b52: every train job held a slot for its whole life, waiting ones included)
    import threading

    from nadpipe.runner import slots

    locks = tmp_path / "slots"
    monkeypatch.setenv(slots.SLOTS_ENV, "0")
    monkeypatch.setenv(slots.LOCK_DIR_ENV, str(locks))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    backend = Backend(device="cpu", batch_cells=4)

    def job(variant, backend=backend):
        out = tmp_path / "out" / variant
        spec = plan.train_job("fourier", "mlp", variant, (0,))
        return train_job(spec, None, [f"{out}.pt"], [f"{out}.json"], backend, slot=1)

    assert "trained with 3 sibling cell(s)" in job("f0_0")  # the leader, given the slot
    done = []
    with slots.gpu_slot(["0"], str(locks)):  # another GPU job holds the only slot
        worker = threading.Thread(target=lambda: done.append(job("f1_1")), daemon=True)
        worker.start()
        worker.join(timeout=60)
        assert done and "trained ahead in a batch by a sibling's job" in done[0]
    # a sibling whose job finds no GPU (a CPU node under SLURM: no batching there) claims too
    alone = Backend(device="cpu")
    assert "trained ahead in a batch by a sibling's job" in job("f0_1", alone)
