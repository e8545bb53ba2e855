import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nadpipe.dipole import WindowedDipole
from nadpipe.models import build_model
from nadpipe.nads import (
    batched_sensitivities,
    dipole_plan,
    dipole_probes,
    dipole_sensitivity,
    draw_networks,
)
from nadpipe.settings import NadSettings, Shape

SHAPE = Shape(1, 32, 32)


def odd_net() -> nn.Sequential:
    """Every windowed kind: strided, dilated, grouped, unbiased and padded convolutions, batch
    norm with running statistics, max and average pooling with odd sizes, then modules that
    end the windows."""
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.LeakyReLU(0.1),
        nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2, bias=False),
        nn.Tanh(),
        nn.MaxPool2d(3, stride=2),
        nn.AvgPool2d(2, stride=1),
        nn.Conv2d(6, 5, 1),
        nn.GroupNorm(1, 5),
        nn.Flatten(),
        nn.LazyLinear(1),
    )


class Branchy(nn.Module):
    """Not a Sequential: functional ReLU, a method, sums with a number and of two branches of
    different reach, a channel concatenation, then a view, and a parameter and a buffer read
    in `forward` (graph attributes)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 3, 3, padding=1)
        self.b = nn.Conv2d(3, 3, 5, padding=2, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(6 * 16 * 16, 1)
        self.gain = nn.Parameter(torch.ones(1))
        self.register_buffer("shift", torch.full((1,), 0.5))

    def forward(self, x):
        h = F.relu(self.a(x)) * 2.0
        y = torch.cat([self.b(h).tanh() + h, h - 1], dim=1)
        return self.head(self.pool(y).view(x.shape[0], -1)) * self.gain + self.shift


def plain(net: nn.Module, x0: torch.Tensor, sel: slice) -> torch.Tensor:
    coords, deltas = dipole_probes(100.0, Shape(*x0.shape), "cpu")
    probes = x0.repeat(len(coords), 1, 1, 1)
    probes[torch.arange(len(coords)), coords[:, 0], coords[:, 1], coords[:, 2]] += deltas
    with torch.inference_mode():
        return net(probes[sel])[:, 0]


@pytest.mark.parametrize(
    ("name", "windowed", "sel"),
    [
        ("lenet", 6, slice(None)),  # conv, relu, pool, conv, relu, pool
        ("lenet_nopool", 4, slice(None)),  # the second conv's windows cover most of its map
        ("odd", 8, slice(None)),
        ("branchy", 9, slice(None)),  # a, relu, mul, b, tanh, add, sub, cat, pool
        ("resnet18", 32, slice(0, 2048, 97)),  # stem, layer1, layer2's first block and a half
        ("vgg11", 11, slice(5, 2048, 61)),
        ("densenet121", 59, slice(7, 2048, 149)),  # concatenations: the first dense block
    ],
)
def test_windowed_probes_equal_the_plain_forward(name, windowed, sel):
    torch.manual_seed(0)
    custom = {"odd": odd_net, "branchy": Branchy}
    template = custom[name]() if name in custom else build_model(name, 1, 1, {})
    template(torch.zeros(2, 1, 32, 32))  # materialise lazy modules
    for m in template.modules():
        if isinstance(m, nn.BatchNorm2d):  # statistics other than the identity's
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    template.eval()
    coords, deltas = dipole_probes(100.0, SHAPE, "cpu")
    plan = WindowedDipole.plan(template, coords, (32, 32), "cpu")
    assert len(plan.windowed) == windowed, plan.windowed
    x0 = torch.randn(1, 32, 32, generator=torch.Generator().manual_seed(3))
    net = copy.deepcopy(template)  # another network of the planned structure
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    with torch.inference_mode():
        f = plan(net, x0, deltas, sel)
    expected = plain(net, x0, sel)
    assert f.shape == expected.shape
    torch.testing.assert_close(f, expected, rtol=0, atol=1e-5 * expected.abs().max().item())
    assert expected.std() > 0  # the probes do differ


def test_what_is_not_windowed():
    coords, _ = dipole_probes(100.0, SHAPE, "cpu")

    def stop(*modules):
        plan = WindowedDipole.plan(nn.Sequential(*modules), coords, (32, 32), "cpu")
        return None if plan is None else len(plan.windowed)

    class MyConv(nn.Conv2d):  # a subclass may compute something else
        pass

    conv = nn.Conv2d(1, 2, 3)
    tail = [nn.Flatten(), nn.LazyLinear(1)]
    assert stop(conv, nn.ReLU(), nn.MaxPool2d(2), *tail) == 3
    assert stop(MyConv(1, 2, 3), *tail) is None
    assert stop(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect"), *tail) is None
    assert stop(nn.Conv2d(1, 2, 3, padding="same"), *tail) is None
    assert stop(conv, nn.MaxPool2d(2, ceil_mode=True), *tail) == 1
    assert stop(conv, nn.AvgPool2d(2, padding=1), *tail) == 1
    assert stop(conv, nn.BatchNorm2d(2).train(), *tail) == 1
    assert stop(conv, nn.BatchNorm2d(2).eval(), *tail) == 2
    assert stop(nn.Flatten(), nn.Linear(1024, 1)) is None  # an MLP: nothing to window
    assert stop(nn.Conv2d(1, 2, 17), *tail) is None  # covers most of its map at once

    class Untraceable(nn.Module):  # control flow on values: torch.fx cannot trace it
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(conv, *tail)

        def forward(self, x):
            return self.body(x) if x.sum() > 0 else -self.body(x)

    assert WindowedDipole.plan(Untraceable(), coords, (32, 32), "cpu") is None


def test_windowed_estimator_equals_the_real_modules_and_is_the_default():
    template = build_model("lenet", 1, 1, {}).eval()
    settings = NadSettings(n_networks=3)
    plan = dipole_plan(template, settings, SHAPE, "cpu")
    assert plan is not None and plan.windowed == ["0", "1", "2", "3", "4", "5"]
    assert dipole_plan(template, NadSettings(windowed=False), SHAPE, "cpu") is None
    assert dipole_plan(template, NadSettings("gradient"), SHAPE, "cpu") is None
    nets = draw_networks(lambda: build_model("lenet", 1, 1, {}), settings, range(5, 8))
    x0 = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    told = []  # progress, network by network
    windowed = batched_sensitivities(nets, x0, "dipole", 100.0, 700, plan, told.append)
    assert told == [1, 1, 1]
    whole = batched_sensitivities(nets, x0, "dipole", 100.0, 512)
    for k, net in enumerate(nets):
        one = dipole_sensitivity(net, x0, 100.0, 512)
        for got in (windowed[k], whole[k]):
            assert torch.allclose(got, one, rtol=1e-4, atol=1e-5 * one.abs().max())


@pytest.mark.parametrize("shape", [Shape(3, 16, 16), Shape(2, 16, 24)])
def test_windowed_probes_of_colour_and_non_square_inputs(shape):
    torch.manual_seed(1)
    net = build_model("lenet", shape.c, 1, size=shape.size).eval()
    coords, deltas = dipole_probes(100.0, shape, "cpu")
    assert len(coords) == 2 * shape.d and set(coords[:, 0].tolist()) == set(range(shape.c))
    plan = WindowedDipole.plan(net, coords, shape.size, "cpu")
    x0 = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        f = plan(net, x0, deltas, slice(None))
    expected = plain(net, x0, slice(None))
    torch.testing.assert_close(f, expected, rtol=0, atol=1e-5 * expected.abs().max().item())
