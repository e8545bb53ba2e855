import pytest
import torch

from nadpipe.data import PairSpec
from nadpipe.ensemble import can_vectorize, train_ensemble
from nadpipe.models import build_model
from nadpipe.train import TrainSettings, init_seed, train_model

SEEDS = [0, 1, 2]


def _member_data(n):
    # each member its own noise draw, as each seed of a cell has
    v = torch.full((1024,), 1 / 32.0)
    data = [PairSpec(v, v, 1.0, 0.5, 1.0, n, 2, seed=100 + s).generate()["train"] for s in SEEDS]
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
        train_model(net, x, y, settings, seed=s, progress=False)
        for net, x, y, s in zip(separate, xs, ys, SEEDS, strict=True)
    ]
    together = [_fresh(model, s) for s in SEEDS]
    assert can_vectorize(together[0])
    hist_ens = train_ensemble(together, xs, ys, settings, SEEDS, progress=False)
    for a, b, ha, hb in zip(separate, together, hist_sep, hist_ens, strict=True):
        for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(pb, pa, atol=2e-5, rtol=1e-4, msg=name)
        for ra, rb in zip(ha, hb, strict=True):
            assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4)
            assert rb["train_accuracy"] == pytest.approx(ra["train_accuracy"], abs=2 / 600)
    # the members did learn different things: seeds differ
    first = [next(iter(net.state_dict().values())) for net in together]
    assert not torch.allclose(first[0], first[1])


def test_clipping_is_per_member_in_the_ensemble():
    # a member with huge inputs is clipped hard; the others must not be scaled with it
    xs, ys = _member_data(256)
    xs[0] *= 1000
    settings = TrainSettings(epochs=1, lr_max=0.1, batch_size=128, grad_clip=0.5)
    together = [_fresh("mlp", s) for s in SEEDS]
    train_ensemble(together, xs, ys, settings, SEEDS, progress=False)
    alone = _fresh("mlp", SEEDS[1])
    train_model(alone, xs[1], ys[1], settings, seed=SEEDS[1], progress=False)
    torch.testing.assert_close(
        together[1].state_dict()["1.weight"], alone.state_dict()["1.weight"], atol=2e-5, rtol=1e-4
    )


def test_batchnorm_models_fall_back_to_one_after_another():
    xs, ys = _member_data(32)
    xs, ys = xs[:2], ys[:2]
    settings = TrainSettings(epochs=1, batch_size=16)
    nets = [_fresh("resnet18", s) for s in SEEDS[:2]]
    assert not can_vectorize(nets[0])
    hist = train_ensemble(nets, xs, ys, settings, SEEDS[:2], progress=False)
    ref = _fresh("resnet18", SEEDS[1])
    train_model(ref, xs[1], ys[1], settings, seed=SEEDS[1], progress=False)
    assert len(hist) == 2 and len(hist[1]) == 1
    for k, v in ref.state_dict().items():
        assert torch.equal(nets[1].state_dict()[k], v), k


def test_a_diverging_member_stops_its_record_and_spares_the_others():
    xs, ys = _member_data(256)
    xs[0] *= 1e10  # only member 0 blows up (to NaN in its second epoch)
    settings = TrainSettings(epochs=4, lr_max=1.0, batch_size=128, grad_clip=None)
    hist = train_ensemble(
        [_fresh("mlp", s) for s in SEEDS], xs, ys, settings, SEEDS, progress=False
    )
    alone = train_model(
        _fresh("mlp", SEEDS[0]), xs[0], ys[0], settings, seed=SEEDS[0], progress=False
    )
    assert len(hist[0]) == len(alone) < 4  # stops where separate training stops
    assert len(hist[1]) == len(hist[2]) == 4
    assert all(r["loss"] == r["loss"] for r in hist[1])  # finite (not NaN) throughout
