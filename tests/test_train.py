import math

import pytest
import torch

from nadpipe.data import PairSpec
from nadpipe.evaluate import evaluate_conditions
from nadpipe.models import build_model
from nadpipe.train import (
    TrainingDiverged,
    TrainSettings,
    diverged_epoch,
    init_seed,
    train_model,
    triangular_lr,
)


def test_triangular_schedule_rises_to_the_peak_at_half_and_returns_to_zero():
    total, peak = 100, 0.2
    lrs = [triangular_lr(s, total, peak) for s in range(total)]
    assert lrs[49] == pytest.approx(peak)  # end of step 50 of 100
    assert lrs[-1] == 0.0 and 0 < lrs[0] < 0.01
    assert all(a < b for a, b in zip(lrs[:49], lrs[1:50], strict=True))
    assert all(a > b for a, b in zip(lrs[49:-1], lrs[50:], strict=True))
    assert max(lrs) == pytest.approx(peak)


def _easy_pair(n_train=2000, n_test=1000):
    dc = torch.full((1024,), 1 / 32.0)  # the constant image: pooling keeps it, LeNet learns it
    return PairSpec(dc, dc, 1.0, 0.5, 1.0, n_train, n_test, seed=5).generate()


def _train(seed, data, epochs=8):
    init_seed(seed, "lenet")
    net = build_model("lenet", 2, 2)
    hist = train_model(net, *data["train"], TrainSettings(epochs=epochs), seed, progress=False)
    return net, hist


def test_lenet_learns_an_easy_direction():
    data = _easy_pair()
    net, hist = _train(0, data)
    assert len(hist) == 8 and hist[-1]["loss"] < hist[0]["loss"]
    both = next(
        r for r in evaluate_conditions(net, {"test": data["test"]}) if r["condition"] == "both"
    )
    assert both["accuracy"] > 0.95


def test_training_is_deterministic_on_cpu():
    data = _easy_pair(n_train=512, n_test=64)
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
    train_model(net, x, y, s, seed=0, progress=False)  # one step, at lr 1.0 (end of first half)
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert (after - before).norm().item() <= 0.5 + 1e-5


def _diverging():
    data = _easy_pair(n_train=512, n_test=2)
    torch.manual_seed(0)
    return build_model("mlp", 2, 2), data["train"]


def test_divergence_stops_the_training_and_is_recorded():
    net, (x, y) = _diverging()
    s = TrainSettings(epochs=6, lr_max=1e4, grad_clip=None)
    hist = train_model(net, x, y, s, seed=0, progress=False)
    assert len(hist) < 6 and not math.isfinite(hist[-1]["loss"])
    assert diverged_epoch(hist) == hist[-1]["epoch"]
    assert diverged_epoch(_train(0, _easy_pair(512, 2), epochs=1)[1]) is None


def test_divergence_can_be_a_hard_failure():
    net, (x, y) = _diverging()
    s = TrainSettings(epochs=6, lr_max=1e4, grad_clip=None, fail_on_divergence=True)
    with pytest.raises(TrainingDiverged, match=r"loss nan in epoch \d.*fail_on_divergence"):
        train_model(net, x, y, s, seed=0, progress=False)
