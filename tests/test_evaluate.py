import torch
from torch import nn

from nadpipe.data import PairSpec
from nadpipe.evaluate import CONDITIONS, evaluate_conditions, keep_channels


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
    data = PairSpec(v1, v2, 1.0, 0.5, 1.0, 200, 400, seed=1).generate()
    rows = {
        r["condition"]: r for r in evaluate_conditions(UsesChannel(v1, 0), {"test": data["test"]})
    }
    assert set(rows) == set(CONDITIONS)
    assert rows["both"]["accuracy"] == 1.0 and rows["ch1_only"]["accuracy"] == 1.0
    # channel 1 zeroed: every logit pair is (0, 0), argmax picks class 0, half the labels
    assert rows["ch2_only"]["accuracy"] == 0.5
    rows2 = {
        r["condition"]: r for r in evaluate_conditions(UsesChannel(v2, 1), {"test": data["test"]})
    }
    assert rows2["ch2_only"]["accuracy"] == 1.0 and rows2["ch1_only"]["accuracy"] == 0.5
