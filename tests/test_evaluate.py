import torch
from torch import nn

from nadpipe.data import pair_splits
from nadpipe.evaluate import evaluate_conditions, keep_channels, project_out_band
from nadpipe.io import generator
from nadpipe.settings import Shape
from nadpipe.studies import REGISTRY

SHAPE = Shape(1, 32, 32)


def test_keep_channels_zeroes_exactly_the_other_channels():
    x = torch.randn(5, 4, 32, 32)
    out = keep_channels(x, (0, 2))
    assert torch.equal(out[:, [0, 2]], x[:, [0, 2]])
    assert torch.count_nonzero(out[:, [1, 3]]) == 0
    assert torch.count_nonzero(x[:, 1]) > 0  # the input is left alone


class UsesChannel(nn.Module):
    """Classifies by the sign of <x[:, c], v>: a model that relies on one channel only."""

    def __init__(self, v, channel):
        super().__init__()
        self.v, self.c = v, channel

    def forward(self, x):
        s = x[:, self.c].reshape(len(x), -1) @ self.v
        return torch.stack([-s, s], dim=1)


def test_conditions_reveal_which_channel_a_model_uses():
    v1, v2 = torch.eye(1024)[0], torch.eye(1024)[1]
    data = pair_splits(v1, v2, SHAPE, 1.0, 0.5, 1.0, {"test": 400}, generator("t"))
    conditions = REGISTRY["nad_pairs"].conditions(SHAPE)
    assert conditions == {"both": (0, 1), "ch1_only": (0,), "ch2_only": (1,)}
    rows = {
        r["condition"]: r for r in evaluate_conditions(UsesChannel(v1, 0), data, 500, conditions)
    }
    assert rows["both"]["accuracy"] == 1.0 and rows["ch1_only"]["accuracy"] == 1.0
    # channel 1 zeroed: every logit pair is (0, 0), argmax picks class 0, half the labels
    assert rows["ch2_only"]["accuracy"] == 0.5
    rows2 = {
        r["condition"]: r for r in evaluate_conditions(UsesChannel(v2, 1), data, 500, conditions)
    }
    assert rows2["ch2_only"]["accuracy"] == 1.0 and rows2["ch1_only"]["accuracy"] == 0.5


def test_colour_pairs_have_channel_blocks():
    assert REGISTRY["nad_pairs"].conditions(Shape(3, 8, 8)) == {
        "both": (0, 1, 2, 3, 4, 5),
        "ch1_only": (0, 1, 2),
        "ch2_only": (3, 4, 5),
    }


def test_removing_a_band_of_nads_removes_exactly_its_components():
    q = torch.linalg.qr(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))[0].T
    x = torch.randn(10, 2, 8, 4, generator=torch.Generator().manual_seed(1))  # 2 blocks of 32
    basis = q[:32, :32] if False else torch.linalg.qr(torch.randn(32, 32))[0].T  # rows orthonormal
    out = project_out_band(x, basis, (3, 7))
    coef = out.reshape(10, 2, 32) @ basis.T  # (n, blocks, NADs)
    assert coef[:, :, 3:8].abs().max() < 1e-5  # the band is gone in every block
    before = x.reshape(10, 2, 32) @ basis.T
    keep = [k for k in range(32) if not 3 <= k <= 7]
    torch.testing.assert_close(coef[:, :, keep], before[:, :, keep], atol=1e-5, rtol=0)
    only = project_out_band(x, basis, (3, 7), keep=True)
    torch.testing.assert_close(only + out, x, atol=1e-5, rtol=0)
