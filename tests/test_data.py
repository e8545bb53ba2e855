import pytest
import torch

from nadpipe.data import (
    balanced_labels,
    checksum,
    dv_splits,
    fourier_direction,
    pair_splits,
    sample_dv,
)
from nadpipe.io import derive_seed, generator
from nadpipe.settings import Shape
from nadpipe.studies import REGISTRY, DataSpec

SHAPE = Shape(1, 32, 32)


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
    assert _held_out_accuracy(x, y.double()) > 0.9  # the same probe finds the label along v


def test_pair_data_shapes_labels_and_channel_blocks(unit_vector):
    v2 = torch.roll(unit_vector, 1)
    data = pair_splits(
        unit_vector, v2, SHAPE, 1.0, 0.5, 1.0, {"train": 300, "test": 200}, generator("p")
    )
    x, y = data["train"]
    assert x.shape == (300, 2, 32, 32) and x.dtype == torch.float32
    assert set(y.tolist()) == {0, 1} and y.sum() == 150
    sign = 2 * y.float() - 1  # the same label drives both channels
    torch.testing.assert_close(
        x[:, 0].reshape(300, -1) @ unit_vector, 1.0 * sign, atol=2e-5, rtol=0
    )
    torch.testing.assert_close(x[:, 1].reshape(300, -1) @ v2, 0.5 * sign, atol=2e-5, rtol=0)
    assert data["test"][0].shape == (200, 2, 32, 32)
    # colour NADs (3 x 8 x 8): two blocks of three channels
    u = torch.randn(3, 8, 8)
    colour = pair_splits(
        u / u.norm(), u / u.norm(), Shape(3, 8, 8), 1.0, 1.0, 1.0, {"train": 10}, generator("c")
    )
    assert colour["train"][0].shape == (10, 6, 8, 8)


def test_a_study_rebuilds_the_same_tensors_from_its_spec_and_keeps_its_streams():
    vectors = torch.linalg.qr(torch.randn(1024, 1024, generator=torch.Generator().manual_seed(2)))[
        0
    ].T
    settings = (("eps1", 1.0), ("eps2", 0.5), ("sigma", 1.0), ("n_train", 50), ("n_test", 20))
    spec = DataSpec("nad_pairs", "i3_j7", 4, SHAPE, settings)
    pairs = REGISTRY["nad_pairs"]
    a, b = pairs.build(spec, vectors), pairs.build(spec, vectors)
    assert checksum(a) == checksum(b) and torch.equal(a["train"][0], b["train"][0])
    # the data stream of cell (i, j, seed) is derive_seed("pair", i, j, seed), as it always was
    expected = pair_splits(
        vectors[3].reshape(SHAPE),
        vectors[7].reshape(SHAPE),
        SHAPE,
        1.0,
        0.5,
        1.0,
        {"train": 50, "test": 20},
        generator("pair-data", derive_seed("pair", 3, 7, 4)),
    )
    assert checksum(expected) == checksum(a)
    other = pairs.build(DataSpec("nad_pairs", "i3_j7", 5, SHAPE, settings), vectors)
    assert checksum(other) != checksum(a)  # another seed draws other data


def test_single_direction_data_follow_the_shape():
    v = torch.randn(3, 16, 16)
    data = dv_splits(v / v.norm(), Shape(3, 16, 16), 1.0, 1.0, {"train": 40}, generator("d"))
    x, y = data["train"]
    assert x.shape == (40, 3, 16, 16)
    coef = x.reshape(40, -1).double() @ (v / v.norm()).flatten().double()
    torch.testing.assert_close(coef, 2 * y.double() - 1, atol=1e-4, rtol=0)


def test_fourier_directions_are_unit_real_dft_basis_vectors():
    v = fourier_direction(3, 5, SHAPE).double()
    assert abs(v.norm().item() - 1) < 1e-6
    spectrum = torch.fft.fft2(v[0]).abs()
    peaks = {tuple(int(i) for i in idx) for idx in (spectrum > 1e-3).nonzero()}
    assert peaks == {(3, 5), (29, 27)}  # the frequency and its mirror only
    torch.testing.assert_close(
        fourier_direction(0, 0, SHAPE).flatten(), torch.full((1024,), 1 / 32)
    )
    # the centred layout's negative frequencies are the same directions as their mirrors
    torch.testing.assert_close(fourier_direction(-3, -5, SHAPE), fourier_direction(3, 5, SHAPE))
    # non-square and colour shapes
    w = fourier_direction(1, 2, Shape(2, 8, 16))
    assert w.shape == (2, 8, 16) and abs(w.norm().item() - 1) < 1e-6
