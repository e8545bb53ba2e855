"""User models that do not fit what nadpipe needs, one kind each: the catalogue of bad inputs
(docs/generate.py) and the config tests (tests/test_config.py) run them."""

import torch
from torch import nn


def good(in_channels, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, num_classes))


def bad_shape(in_channels, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, 5))


class Pair(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.lin = nn.Linear(c * 1024, k)

    def forward(self, x):
        out = self.lin(x.flatten(1))
        return out, out


def tuple_out(in_channels, num_classes):
    return Pair(in_channels, num_classes)


def rgb_only(in_channels, num_classes):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(num_classes))


class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        raise TypeError("boom in forward")


def raises_in_forward(in_channels, num_classes):
    return Raises()


def not_a_module(in_channels, num_classes):
    return "a string"


class TrainOnly(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.lin = nn.Linear(c * 1024, k)

    def forward(self, x):
        out = self.lin(x.flatten(1))
        return (out, out) if self.training else out


def tuple_in_training(in_channels, num_classes):
    return TrainOnly(in_channels, num_classes)


def frozen(in_channels, num_classes):
    net = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, num_classes))
    for p in net.parameters():
        p.requires_grad_(False)
    return net


class Overflows(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.lin = nn.Linear(c * 1024, k)

    def forward(self, x):
        return self.lin(x.flatten(1)) * float("inf")


def not_finite(in_channels, num_classes):
    return Overflows(in_channels, num_classes)


def widths(in_channels, num_classes, width=8, depth=1):
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    layers = [nn.Flatten(), nn.Linear(in_channels * 1024, width)]
    for _ in range(depth - 1):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, num_classes))


def one_logit():  # the Python API's kind of builder: enough for NADs, not for training
    return nn.Sequential(nn.Flatten(), nn.Linear(1024, 1))
