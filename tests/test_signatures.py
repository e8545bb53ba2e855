"""Architecture signatures on bases whose answers are known."""

import numpy as np
import pytest

from nadpipe.data import fourier_direction
from nadpipe.settings import Shape
from nadpipe.signatures import LOW, low_frequency_share, signature_figure, signatures

SHAPE = (1, 8, 8)


def test_low_frequency_share_of_known_directions():
    dc = fourier_direction(0, 0, Shape(*SHAPE)).numpy().reshape(1, 64)
    nyquist = fourier_direction(4, 4, Shape(*SHAPE)).numpy().reshape(1, 64)
    assert low_frequency_share(dc, SHAPE, 1) == pytest.approx(1.0)  # all at the zero frequency
    assert low_frequency_share(nyquist, SHAPE, 1) == pytest.approx(0.0, abs=1e-12)
    q = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0].T
    assert low_frequency_share(q, SHAPE, 64) == pytest.approx(1.0)  # every frequency
    shares = [low_frequency_share(np.random.default_rng(s).standard_normal((16, 64)), SHAPE, 16)
              for s in range(20)]  # fmt: skip
    assert np.mean(shares) == pytest.approx(16 / 64, rel=0.15)  # random directions: about k/d
    colour = np.repeat(dc.reshape(1, 1, 64), 3, axis=1).reshape(1, 192) / np.sqrt(3)
    assert low_frequency_share(colour, (3, 8, 8), 1) == pytest.approx(1.0)


def test_pairwise_overlaps_and_the_figure(tmp_path):
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((64, 64)))[0].T
    bases = {"a": q, "same": q.copy(), "reversed": q[::-1].copy(), "other_size": np.eye(32)}
    shapes = {"a": SHAPE, "same": SHAPE, "reversed": SHAPE, "other_size": (1, 4, 8)}
    df = signatures(bases, shapes, ks=(10, 50))
    get = df.set_index(["arch_a", "arch_b", "k"])["overlap"]
    assert get["a", "same", 10] == pytest.approx(1.0) and get["same", "a", 50] == pytest.approx(1.0)
    assert get["a", "reversed", 10] == pytest.approx(0.0, abs=1e-12)  # disjoint first 10
    assert ("a", "other_size", 10) not in get.index  # no common space
    assert set(df[df["arch_b"] == LOW]["arch_a"]) == set(bases)
    fig_path = tmp_path / "s.png"
    fig = signature_figure(df, str(fig_path))
    assert fig_path.stat().st_size > 10_000
    first = fig.axes[0]  # k = 10: rows and columns are the architectures, in order
    assert [t.get_text() for t in first.get_yticklabels()] == sorted(bases)
    cells = {t.get_text() for t in first.texts}
    assert {"1.00", "0.00", "other\ninput size"} <= cells  # no common space: said, not blank
    assert "energy share at the k lowest frequencies" in [a.get_ylabel() for a in fig.axes]
    assert "subspace overlap ‖UₖVₖᵀ‖²/k" in [a.get_ylabel() for a in fig.axes]  # colour bar
    # what random directions give, in the table and drawn on each bar (820f241: no chance line)
    chance = df.set_index(["arch_a", "arch_b", "k"])["chance"]
    assert chance["a", "same", 10] == pytest.approx(10 / 64)
    assert chance["a", LOW, 50] == pytest.approx(50 / 64)
    assert chance["other_size", LOW, 10] == pytest.approx(10 / 32)
    bars = next(a for a in fig.axes if a.get_ylabel().startswith("energy share"))
    (line,) = [c for c in bars.collections if c.get_label() == "random directions (chance)"]
    assert len(line.get_segments()) == len(bases)  # a mark on each k = 10 bar
    segments = [seg for c in bars.collections for seg in c.get_segments() if len(seg)]
    heights = sorted({round(seg[0][1], 6) for seg in segments})
    assert heights == pytest.approx(sorted({10 / 64, 50 / 64, 10 / 32}))
    assert "random directions (chance)" in [t.get_text() for t in bars.get_legend().texts]
