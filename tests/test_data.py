import pytest
import torch

from nadpipe.data import (
    ChecksumError,
    PairSpec,
    balanced_labels,
    load_pair_data,
    sample_dv,
    write_pair_spec,
)
from nadpipe.io import generator, load_torch, save_torch


def test_balanced_labels_are_balanced_and_shuffled():
    y = balanced_labels(1001, generator("t"))
    assert (y == -1).sum() == 500 and (y == 1).sum() == 501
    assert not torch.equal(y, y.sort().values)


def test_dv_projection_is_plus_minus_eps(unit_vector):
    y = balanced_labels(4000, generator("t"))
    x = sample_dv(unit_vector, y, eps=0.7, sigma=2.0, gen=generator("x"))
    torch.testing.assert_close(x @ unit_vector, 0.7 * y, atol=2e-5, rtol=0)


def test_dv_orthogonal_variance_is_sigma_squared(unit_vector):
    y = balanced_labels(20000, generator("t"))
    x = sample_dv(unit_vector, y, eps=1.0, sigma=2.0, gen=generator("x")).double()
    w = x - (x @ unit_vector.double())[:, None] * unit_vector.double()
    # total variance of the noise is sigma^2 (d - 1): sigma^2 in every direction orthogonal to v
    assert (w.var(0).sum() / 1023).item() == pytest.approx(4.0, rel=0.01)
    u = torch.randn(1024, generator=torch.Generator().manual_seed(5)).double()
    u -= (u @ unit_vector.double()) * unit_vector.double()
    u /= u.norm()
    assert (x @ u).var().item() == pytest.approx(4.0, rel=0.05)


def _held_out_accuracy(feats, y):
    """Accuracy on the second half of sign(feats . d), d the class-mean difference on the first."""
    n = len(y) // 2
    d = feats[:n][y[:n] > 0].mean(0) - feats[:n][y[:n] < 0].mean(0)
    return ((feats[n:] @ d).sign() == y[n:]).double().mean().item()


def test_dv_label_does_not_leak_into_orthogonal_noise(unit_vector):
    y = balanced_labels(20000, generator("t"))
    x = sample_dv(unit_vector, y, eps=2.0, sigma=1.0, gen=generator("x")).double()
    w = x - (x @ unit_vector.double())[:, None] * unit_vector.double()
    assert abs(_held_out_accuracy(w, y.double()) - 0.5) < 0.03
    # the same probe does find the label where it is: along v
    assert _held_out_accuracy(x, y.double()) > 0.9


def _spec(v1, v2, **kw):
    args = dict(eps1=1.0, eps2=0.5, sigma=1.0, n_train=300, n_test=200, seed=11)
    return PairSpec(v1=v1, v2=v2, **{**args, **kw})


def test_pair_spec_shapes_labels_and_channels(unit_vector):
    v2 = torch.roll(unit_vector, 1)
    data = _spec(unit_vector, v2).generate()
    x, y = data["train"]
    assert x.shape == (300, 2, 32, 32) and x.dtype == torch.float32
    assert set(y.tolist()) == {0, 1} and y.sum() == 150
    sign = 2 * y.float() - 1  # the same label drives both channels
    torch.testing.assert_close(
        x[:, 0].reshape(300, -1) @ unit_vector, 1.0 * sign, atol=2e-5, rtol=0
    )
    torch.testing.assert_close(x[:, 1].reshape(300, -1) @ v2, 0.5 * sign, atol=2e-5, rtol=0)
    assert data["test"][0].shape == (200, 2, 32, 32)


def test_pair_spec_regenerates_exactly_and_checks_its_checksum(tmp_path, unit_vector):
    path = str(tmp_path / "cell.pt")
    write_pair_spec(_spec(unit_vector, unit_vector), path, {"arch": "x"})
    first, stored = load_pair_data(path)
    again, _ = load_pair_data(path)
    assert stored["meta"] == {"arch": "x"}
    for split in first:
        assert torch.equal(first[split][0], again[split][0])
    # a different seed draws different data
    other = _spec(unit_vector, unit_vector, seed=12).generate()
    assert not torch.equal(other["train"][0], first["train"][0])
    # a tampered spec no longer matches its checksum
    blob = load_torch(path)
    blob["spec"]["sigma"] = 1.5
    save_torch(blob, path)
    with pytest.raises(ChecksumError, match="cell.pt"):
        load_pair_data(path)
