"""The training loop: the learning-rate schedules, determinism, clipping, divergence, and seed
ensembles against separate training."""

import contextlib
import json
import math

import pytest
import torch

from nadpipe.data import pair_splits
from nadpipe.evaluate import evaluate_conditions
from nadpipe.io import generator
from nadpipe.models import build_model
from nadpipe.settings import Shape, TrainSettings
from nadpipe.train import (
    TrainingDiverged,
    can_stack,
    diverged_epoch,
    init_seed,
    lr_factor,
    total_steps,
    train,
    train_one,
)

SHAPE = Shape(1, 32, 32)
SEEDS = [0, 1, 2]


@pytest.mark.parametrize("schedule", ["triangular", "linear_decay"])
def test_schedules_match_their_hand_computed_values_through_lr_scheduler(schedule):
    total, peak = 10, 0.2
    # by hand, the learning rate of step s (0-based), evaluated at the end of the step:
    # triangular rises 0 -> peak over the first half and falls back to 0; linear_decay falls
    # from peak to 0 (the NAD code: lr = max_lr * (1 - (s + 1) / total))
    by_hand = {
        "triangular": [0.04, 0.08, 0.12, 0.16, 0.2, 0.16, 0.12, 0.08, 0.04, 0.0],
        "linear_decay": [0.18, 0.16, 0.14, 0.12, 0.1, 0.08, 0.06, 0.04, 0.02, 0.0],
    }[schedule]
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=peak)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(schedule, total))
    used = []
    for _ in range(total):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert used == pytest.approx(by_hand, abs=1e-12)
    # and the training loop uses it: 2 epochs of 5 steps, the last lr of each epoch recorded
    x, y = torch.randn(640, 1, 32, 32), torch.randint(0, 2, (640,))
    s = TrainSettings(epochs=2, lr_max=peak, lr_schedule=schedule, batch_size=128)
    assert total_steps(640, s) == total
    hist = train_one(build_model("logreg", 1, 2), x, y, s, seed=0)
    assert [h["lr_end"] for h in hist] == pytest.approx([by_hand[4], by_hand[9]], abs=1e-12)


def _easy(n_train=2000, n_test=1000):
    dc = torch.full((1024,), 1 / 32.0)  # the constant image: pooling keeps it, LeNet learns it
    return pair_splits(
        dc, dc, SHAPE, 1.0, 0.5, 1.0, {"train": n_train, "test": n_test}, generator("e")
    )


def _train(seed, data, epochs=8):
    init_seed(seed, "lenet")
    net = build_model("lenet", 2, 2)
    return net, train_one(net, *data["train"], TrainSettings(epochs=epochs), seed)


def test_lenet_learns_an_easy_direction():
    data = _easy()
    net, hist = _train(0, data)
    assert len(hist) == 8 and hist[-1]["loss"] < hist[0]["loss"]
    rows = evaluate_conditions(net, {"test": data["test"]}, 500, {"both": (0, 1)})
    assert rows[0]["accuracy"] > 0.95


def test_training_is_deterministic_on_cpu():
    data = _easy(n_train=512, n_test=64)
    a, ha = _train(1, data, epochs=2)
    b, hb = _train(1, data, epochs=2)
    c, _ = _train(2, data, epochs=2)
    assert [h["loss"] for h in ha] == [h["loss"] for h in hb]
    for k, va in a.state_dict().items():
        assert torch.equal(va, b.state_dict()[k]), k
    assert not all(torch.equal(va, c.state_dict()[k]) for k, va in a.state_dict().items())


def test_gradient_clipping_bounds_each_update():
    # with clipping at g and momentum 0, one step moves the weights by at most lr * g
    x, y = torch.randn(128, 2, 32, 32) * 100, torch.randint(0, 2, (128,))
    net = build_model("logreg", 2, 2)
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
    s = TrainSettings(epochs=1, lr_max=1.0, momentum=0.0, batch_size=128, grad_clip=0.5)
    train_one(net, x, y, s, seed=0)  # one step, at lr 1.0 (the end of the first half)
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert (after - before).norm().item() <= 0.5 + 1e-5


def _diverging():
    data = _easy(n_train=512, n_test=2)
    torch.manual_seed(0)
    return build_model("mlp", 2, 2), data["train"]


def test_divergence_stops_the_training_and_is_recorded():
    net, (x, y) = _diverging()
    hist = train_one(net, x, y, TrainSettings(epochs=6, lr_max=1e4, grad_clip=None), seed=0)
    assert len(hist) < 6 and not math.isfinite(hist[-1]["loss"])
    assert diverged_epoch(hist) == hist[-1]["epoch"]
    assert diverged_epoch(_train(0, _easy(512, 2), epochs=1)[1]) is None


def test_divergence_can_be_a_hard_failure():
    net, (x, y) = _diverging()
    s = TrainSettings(epochs=6, lr_max=1e4, grad_clip=None, fail_on_divergence=True)
    with pytest.raises(TrainingDiverged, match=r"loss nan in epoch \d.*fail_on_divergence"):
        train_one(net, x, y, s, seed=0)


# -- seed ensembles: one loop, several stacked models ----------------------------------------


def _member_data(n):
    # each member its own noise draw, as each seed of a cell has (the streams of the tests
    # before the redesign, whose tolerance this keeps)
    dc = torch.full((1024,), 1 / 32.0)
    data = [
        pair_splits(
            dc, dc, SHAPE, 1.0, 0.5, 1.0, {"train": n, "test": 2}, generator("pair-data", 100 + s)
        )["train"]
        for s in SEEDS
    ]
    return torch.stack([x for x, _ in data]), torch.stack([y for _, y in data])


def _fresh(model, seed):
    init_seed(seed, model)
    return build_model(model, 2, 2)


@pytest.mark.parametrize("model", ["mlp", "lenet"])
def test_ensemble_equals_separate_training(model):
    xs, ys = _member_data(600)
    settings = TrainSettings(epochs=2, lr_max=0.1, batch_size=128)
    separate = [_fresh(model, s) for s in SEEDS]
    hist_sep = [
        train_one(net, x, y, settings, s)
        for net, x, y, s in zip(separate, xs, ys, SEEDS, strict=True)
    ]
    together = [_fresh(model, s) for s in SEEDS]
    assert can_stack(together[0], xs[0])
    hist_ens = train(together, xs, ys, settings, SEEDS, progress=False)
    for a, b, ha, hb in zip(separate, together, hist_sep, hist_ens, strict=True):
        for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(pb, pa, atol=2e-5, rtol=1e-4, msg=name)
        for ra, rb in zip(ha, hb, strict=True):
            assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4)
            assert rb["train_accuracy"] == pytest.approx(ra["train_accuracy"], abs=2 / 600)
    first = [next(iter(net.state_dict().values())) for net in together]
    assert not torch.allclose(first[0], first[1])  # the members did learn different things


def test_clipping_is_per_member_in_the_ensemble():
    # a member with huge inputs is clipped hard; the others must not be scaled with it
    xs, ys = _member_data(256)
    xs[0] *= 1000
    settings = TrainSettings(epochs=1, lr_max=0.1, batch_size=128, grad_clip=0.5)
    together = [_fresh("mlp", s) for s in SEEDS]
    train(together, xs, ys, settings, SEEDS, progress=False)
    alone = _fresh("mlp", SEEDS[1])
    train_one(alone, xs[1], ys[1], settings, SEEDS[1])
    torch.testing.assert_close(
        together[1].state_dict()["1.weight"], alone.state_dict()["1.weight"], atol=2e-5, rtol=1e-4
    )


def test_batchnorm_models_train_one_after_another():
    xs, ys = _member_data(32)
    xs, ys = xs[:2], ys[:2]
    settings = TrainSettings(epochs=1, batch_size=16)
    nets = [_fresh("resnet18", s) for s in SEEDS[:2]]
    assert not can_stack(nets[0], xs[0])
    hist = train(nets, xs, ys, settings, SEEDS[:2], progress=False)
    ref = _fresh("resnet18", SEEDS[1])
    train_one(ref, xs[1], ys[1], settings, SEEDS[1])
    assert len(hist) == 2 and len(hist[1]) == 1
    for k, v in ref.state_dict().items():
        assert torch.equal(nets[1].state_dict()[k], v), k


def test_a_diverging_member_stops_its_record_and_spares_the_others():
    xs, ys = _member_data(256)
    xs[0] *= 1e10  # only member 0 blows up
    settings = TrainSettings(epochs=4, lr_max=1.0, batch_size=128, grad_clip=None)
    hist = train([_fresh("mlp", s) for s in SEEDS], xs, ys, settings, SEEDS, progress=False)
    alone = train_one(_fresh("mlp", SEEDS[0]), xs[0], ys[0], settings, SEEDS[0])
    assert len(hist[0]) == len(alone) < 4  # stops where separate training stops
    assert len(hist[1]) == len(hist[2]) == 4
    assert all(math.isfinite(r["loss"]) for r in hist[1])


@pytest.mark.parametrize("precision, ran", [("bf16", True), ("fp32", False)])
def test_the_record_says_the_autocast_the_steps_ran_with(
    precision, ran, train_here, tmp_path, monkeypatch
):
    # the CPU has bf16 autocast, so precision bf16 takes the branch an accelerator takes with
    # auto. The record states what the steps ran (observed inside them), not what was asked:
    # with the autocast made a no-op, it says bf16 off although the settings ask for it
    from dataclasses import replace

    from nadpipe import train as nt
    from nadpipe.grid import TrainJob
    from nadpipe.settings import ModelSpec
    from nadpipe.studies import DataSpec

    shape = Shape(1, 8, 8)
    settings = (("eps", 1.0), ("sigma", 1.0), ("n_train", 64), ("n_test", 16))
    job = TrainJob(
        "fourier", "net", "f0_0", (0,), ModelSpec("mlp", {"hidden": [8]}, shape, 2),
        TrainSettings(epochs=2, batch_size=32, precision=precision),
        (DataSpec("fourier", "f0_0", 0, shape, settings),), None, ("net", "fourier", "f0_0"),
    )  # fmt: skip
    outs = [str(tmp_path / "m.pt")], [str(tmp_path / "m.json")]
    train_here(job, outs, tmp_path)
    record = json.loads((tmp_path / "m.json").read_text())
    assert record["applied"]["bf16"] is ran
    assert [row["autocast"] for row in record["history"]] == ["bfloat16" if ran else "off"] * 2
    if ran:
        monkeypatch.setattr(nt, "_autocast", lambda device, on: contextlib.nullcontext())
        asked = replace(job, train=replace(job.train, epochs=1))
        train_here(asked, outs, tmp_path)
        record = json.loads((tmp_path / "m.json").read_text())
        assert nt.applied(asked.train, torch.device("cpu"), 1)["bf16"] is True
        assert record["applied"]["bf16"] is False
