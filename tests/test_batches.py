"""Cells trained together (nadpipe.batching): the plan batches only stale cells; a batch's job
trains them into their ahead files and each cell's own job claims its result, checked against
its spec and its inputs; the results equal training each cell alone up to float rounding; a
member's divergence stays its own; a batch out of device memory trains in halves."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import SCHEMA

from nadpipe import batching
from nadpipe import config as nc
from nadpipe.backend import Backend
from nadpipe.batching import stackable
from nadpipe.grid import Plan
from nadpipe.io import load_torch
from nadpipe.jobs import train_job, train_together_job
from nadpipe.train import TrainingDiverged

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
CPU = Backend(device="cpu")


@pytest.fixture
def plan(tmp_path):
    return Plan(nc.load_config(CONFIG, SCHEMA)[0], str(tmp_path / "results"))


def batches(plan, size: int, forced=frozenset):
    """The plan's batches with gpus.batch_cells at `size`, on an accelerator."""
    cfg = nc.load_config({**CONFIG, "gpus": {"batch_cells": size}}, SCHEMA)[0]
    return Plan(cfg, plan.root).batches(True, forced)


def _alone(plan, arch, variant, out):
    job = plan.train_job("fourier", arch, variant, (0,))
    model, record = str(out / f"{arch}_{variant}.pt"), str(out / f"{arch}_{variant}.json")
    said = train_job(job, None, [model], [record], CPU)
    return said, load_torch(model), json.load(open(record))


def _together(plan, arch, variants, out, **settings):
    """The cells `variants` trained by one batch's job, then claimed each by its own job."""
    jobs = [plan.train_job("fourier", arch, v, (0,)) for v in variants]
    if settings:
        jobs = [type(j)(**{**j.__dict__, "train": type(j.train)(
            **{**j.train.__dict__, **settings})}) for j in jobs]  # fmt: skip
    out.mkdir(exist_ok=True)
    aheads = [str(out / f"{v}.ahead") for v in variants]
    said = train_together_job(jobs, None, aheads, str(out / "batch.ckpt"), CPU)
    return said, jobs, aheads


def _claim(job, ahead, out, inputs=()):
    model, record = str(out / f"{job.variant}.pt"), str(out / f"{job.variant}.json")
    said = train_job(job, None, [model], [record], CPU, ahead=ahead, inputs=list(inputs))
    return said, load_torch(model), json.load(open(record))


@pytest.mark.parametrize("arch", ["mlp", "lenet"])
def test_cells_trained_together_and_claimed_equal_cells_trained_alone(plan, tmp_path, arch):
    cells = [c.variant for c in plan.cells("fourier") if c.arch == arch]
    assert cells == ["f0_0", "f0_1", "f1_0", "f1_1"]
    alone = {v: _alone(plan, arch, v, tmp_path / "alone") for v in cells}
    assert all(r["trained_together"] == 1 for _, _, r in alone.values())
    said, jobs, aheads = _together(plan, arch, cells, tmp_path / "batched")
    assert said == "trained 4 cells together on cpu"
    for job, ahead in zip(jobs, aheads, strict=True):
        told, weights, record = _claim(job, ahead, tmp_path / "batched")
        assert "by its batch's job; claimed" in told and record["trained_together"] == 4
        ref = alone[job.variant]
        for name in ref[1]:  # one optimizer over stacked parameters = the members' side by side
            torch.testing.assert_close(weights[name], ref[1][name], rtol=1e-5, atol=1e-6)
        h = [x for e in record["history"] for x in (e["loss"], e["train_accuracy"])]
        h_alone = [x for e in ref[2]["history"] for x in (e["loss"], e["train_accuracy"])]
        assert h == pytest.approx(h_alone, rel=1e-4)
        assert record["cell_key"] == ref[2]["cell_key"] == batching.cell_key(job)
    assert not list((tmp_path / "batched").glob("*.ckpt*"))  # the batch's checkpoint is gone


def test_a_result_is_claimed_only_for_its_spec_and_its_inputs(plan, tmp_path):
    out = tmp_path / "b"
    _, jobs, aheads = _together(plan, "mlp", ["f0_0", "f0_1"], out)
    # another spec than the one trained (a seed's data settings changed since): trained anew
    other = plan.train_job("fourier", "mlp", "f1_1", (0,))
    said, _, record = _claim(other, aheads[0], out)
    assert "trained for another spec" in said and record["trained_together"] == 1
    # inputs other than the batch's (NADs recomputed since): trained anew too
    nads = tmp_path / "nads.pt"
    nads.write_bytes(b"other NADs")
    said, _, record = _claim(jobs[1], aheads[1], out, inputs=[str(nads)])
    assert "trained on other NADs or CIFAR-10 files" in said and record["trained_together"] == 1
    # an empty ahead file (trains_alone): the cell trains in its own job
    empty = out / "empty.ahead"
    empty.write_bytes(b"")
    said, _, record = _claim(jobs[0], str(empty), out)
    assert "(on cpu)" in said and record["trained_together"] == 1


def test_a_diverging_member_fails_only_its_own_cell(plan, tmp_path, monkeypatch):
    # the second cell's training data blown up by 1e8 (as a bad cell's data would): it diverges;
    # the batch's job records that in its result and ends well; the first cell's result is
    # what it is alone; with fail_on_divergence only the second cell's own job fails
    import nadpipe.jobs as jobs_module

    real = jobs_module.train

    def bad_second(nets, xs, *args, **kwargs):
        xs = xs.clone()
        xs[1] *= 1e8
        return real(nets, xs, *args, **kwargs)

    monkeypatch.setattr(jobs_module, "train", bad_second)
    out = tmp_path / "b"
    said, jobs, aheads = _together(plan, "mlp", ["f0_0", "f0_1"], out, fail_on_divergence=True,
                                   grad_clip=None)  # fmt: skip
    assert said.endswith("1 diverged (recorded in their own results)")
    _, weights, record = _claim(jobs[0], aheads[0], out)
    assert not record["diverged"] and record["trained_together"] == 2
    with pytest.raises(TrainingDiverged, match="mlp f0_1 s0: training diverged"):
        _claim(jobs[1], aheads[1], out)
    assert not os.path.exists(out / "f0_1.pt")
    monkeypatch.setattr(jobs_module, "train", real)
    job = jobs[0]
    model, rec = str(tmp_path / "alone.pt"), str(tmp_path / "alone.json")
    train_job(job, None, [model], [rec], CPU)
    for name, ref in load_torch(model).items():
        torch.testing.assert_close(weights[name], ref, rtol=1e-5, atol=1e-6)


def test_a_batch_out_of_device_memory_trains_in_halves(plan, tmp_path, monkeypatch):
    # a device that refuses to hold more than two cells' training data at once, as a GPU
    # refuses an allocation past its memory (torch.OutOfMemoryError)
    import nadpipe.jobs as jobs_module

    real = jobs_module.train

    def small_device(nets, xs, *args, **kwargs):
        if len(nets) > 2:
            raise torch.OutOfMemoryError(f"{len(nets)} models do not fit")
        return real(nets, xs, *args, **kwargs)

    monkeypatch.setattr(jobs_module, "train", small_device)
    cells = ["f0_0", "f0_1", "f1_0", "f1_1"]
    said, jobs, aheads = _together(plan, "lenet", cells, tmp_path / "b")
    assert said == "trained 4 cells together on cpu"
    alone = {v: _alone(plan, "lenet", v, tmp_path / "alone") for v in cells}
    for job, ahead in zip(jobs, aheads, strict=True):
        _, weights, record = _claim(job, ahead, tmp_path / "b")
        assert record["trained_together"] == 2  # in halves
        for name, ref in alone[job.variant][1].items():
            torch.testing.assert_close(weights[name], ref, rtol=1e-5, atol=1e-6)


def test_the_plan_batches_only_stale_cells_in_chunks_of_the_batch_size(plan, tmp_path):
    cells = plan.batch_cells()
    assert len(cells) == 8 and all(c.ahead.startswith(plan.root) for c in cells)
    found = batches(plan, 4)
    assert [len(b.jobs) for b in found] == [4, 4]  # per architecture
    assert len({a for b in found for a in b.aheads}) == 8
    # two cells of LeNet trained and up to date: the other two train together, alone in chunk
    # of two; the MLP's four as before
    for cell in cells[4:6]:
        os.makedirs(os.path.dirname(cell.model), exist_ok=True)
        open(cell.model, "w").close()
        with open(cell.record, "w") as f:
            json.dump({"spec_key": batching.spec_key(cell.job)}, f)
    found = batches(plan, 4)
    assert [len(b.jobs) for b in found] == [4, 2]
    assert cells[4].ahead not in found[1].aheads and cells[6].ahead in found[1].aheads
    # a record made for another spec is stale; --forcerun train makes every cell stale
    with open(cells[4].record, "w") as f:
        json.dump({"spec_key": "another"}, f)
    assert [len(b.jobs) for b in batches(plan, 4)] == [4, 3]
    assert [len(b.jobs) for b in batches(plan, 4, lambda: frozenset({"train"}))] == [4, 4]
    assert [len(b.jobs) for b in batches(plan, 3)] == [3, 3]  # a chunk of one trains alone
    assert batches(plan, 1) == []
    assert all(stackable(c.job) for c in cells)


def test_a_plan_of_models_probed_before_imports_no_torch(tmp_path):
    # every command of a run that trains cells together plans its batches, and whether a model
    # stacks was a probe with torch (2 to 3 s a command); a registry model's answer is kept
    # with its model check (nadpipe.verdicts), a batch-norm model's "no" too
    code = f"""
import json, sys
from nadpipe import config as nc, grid, verdicts
raw = {CONFIG | {"gpus": {"batch_cells": 4}}!r}
raw["fourier"]["architectures"] = ["mlp", "lenet", "resnet"]
raw["architectures"]["resnet"] = {{"model": "resnet18"}}
plan = grid.Plan(nc.load_config(raw, "{SCHEMA}")[0], "{tmp_path}/results")
sizes = [len(b.jobs) for b in plan.batches(True)]
verdicts.remember()
print(json.dumps([sizes, "torch" in sys.modules]))
"""
    env = {**os.environ, "NADPIPE_CACHE": str(tmp_path / "cache")}

    def planned():
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.splitlines()[-1])

    assert planned() == [[4, 4], True]  # the ResNet's cells train alone: batch norm
    assert sorted(p.read_text() for p in (tmp_path / "cache").rglob("*.stacks")) == ["0", "1", "1"]
    assert planned() == [[4, 4], False]
