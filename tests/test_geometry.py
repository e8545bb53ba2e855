import math

import pytest
import torch
from torch import nn

from nadpipe.data import pair_splits
from nadpipe.geometry import (
    activation_patterns,
    channel_reliance,
    count_transitions,
    cross_section,
    direction_vs_channels,
    ellipse,
    jacobian_norm,
    margins_along,
    trajectories,
    transition_counts,
    unit,
)
from nadpipe.io import generator
from nadpipe.models import build_model
from nadpipe.settings import Shape, TrainSettings
from nadpipe.train import train_one

G = torch.Generator().manual_seed(0)


def linear_net(in_channels=2):
    torch.manual_seed(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, 2))


def test_jacobian_norm_of_a_linear_model_has_its_closed_form():
    # p1 = sigmoid(z1 - z0): dp1/dx = p0 p1 (w1 - w0) = -dp0/dx, so |J|_F = sqrt(2) p0 p1 |w1 - w0|
    net = linear_net()
    x = torch.randn(50, 2, 32, 32, generator=G) * 0.3
    lin = net[1]
    p = torch.softmax(net(x), 1).detach()
    dw = (lin.weight[1] - lin.weight[0]).norm().item()
    expected = (math.sqrt(2) * p[:, 0] * p[:, 1] * dw).mean().item()
    assert jacobian_norm(net, x, batch_size=16) == pytest.approx(expected, rel=1e-5)


def test_a_network_without_relus_has_no_transitions():
    net = nn.Sequential(nn.Flatten(), nn.Linear(1024, 30), nn.Tanh(), nn.Linear(30, 2))
    path = ellipse(
        torch.zeros(1, 32, 32),
        torch.randn(1, 32, 32, generator=G),
        torch.randn(1, 32, 32, generator=G),
        64,
    )
    assert activation_patterns(net, path).shape == (64, 0)
    assert count_transitions(net, path) == 0
    # and its transition counts are NaN: the measure does not apply, 0 would read as "smooth"
    x, y = torch.randn(6, 1, 32, 32, generator=G), torch.arange(6) % 2
    counts = transition_counts(net, x, y, 2, 8, torch.Generator().manual_seed(0))
    assert all(v != v for v in counts.values())


def one_hidden_layer(width=40, d=16):
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(d, width), nn.ReLU(), nn.Linear(width, 2))


def test_transitions_along_a_line_match_the_analytic_count():
    # hidden unit k flips between a and b exactly when w_k.a + b_k and w_k.b + b_k differ in sign
    net = one_hidden_layer()
    a, b = torch.randn(16, generator=G) * 3, torch.randn(16, generator=G) * 3
    pre = lambda p: net[0](p)  # noqa: E731
    expected = int((pre(a).sign() != pre(b).sign()).sum())
    path = a + torch.linspace(0, 1, 5000)[:, None] * (b - a)
    assert expected > 0
    assert count_transitions(net, path, closed=False) == expected


def test_transitions_around_an_ellipse_match_the_analytic_count():
    # w.x(t) + c = A + B cos t + C sin t crosses zero twice per turn iff sqrt(B^2 + C^2) > |A|
    net = one_hidden_layer()
    center, u, w = (torch.randn(16, generator=G) for _ in range(3))
    W, c = net[0].weight.detach(), net[0].bias.detach()
    A, B, C = W @ center + c, W @ u, W @ w
    expected = int(2 * ((B**2 + C**2).sqrt() > A.abs()).sum())
    assert count_transitions(net, ellipse(center, u, w, 20000)) == expected


def test_ellipses_pass_through_their_two_points():
    x = torch.randn(20, 1, 32, 32, generator=G)
    y = torch.arange(20) % 2
    paths = trajectories(x, y, n=3, k=8, gen=torch.Generator().manual_seed(4))
    assert {k: len(v) for k, v in paths.items()} == {"same_class": 3, "diff_class": 3, "random": 3}
    for kind, same in (("same_class", True), ("diff_class", False)):
        for p in paths[kind]:
            i = int(((x - p[0]).flatten(1).norm(dim=1)).argmin())
            j = int(((x - p[4]).flatten(1).norm(dim=1)).argmin())
            torch.testing.assert_close(p[0], x[i], atol=1e-5, rtol=0)
            torch.testing.assert_close(p[4], x[j], atol=1e-5, rtol=0)
            assert (y[i] == y[j]).item() == same
    counts = transition_counts(
        build_model("mlp", 1, 2), x, y, 2, 16, torch.Generator().manual_seed(5)
    )
    assert set(counts) == {"transitions_same_class", "transitions_diff_class", "transitions_random"}
    assert all(v >= 0 for v in counts.values())


def test_cross_section_and_margins_of_a_linear_model():
    net = linear_net()
    lin = net[1]
    w = (lin.weight[1] - lin.weight[0]).detach().reshape(2, 32, 32)
    bias = (lin.bias[1] - lin.bias[0]).item()
    u1 = unit(
        torch.zeros(2, 32, 32).index_put_(
            (torch.tensor(0), torch.tensor(3), torch.tensor(4)), torch.tensor(1.0)
        )
    )
    u2 = torch.zeros(2, 32, 32)
    u2[1] = unit(torch.randn(32, 32, generator=G))
    x = torch.randn(3, 2, 32, 32, generator=G)
    a, b = torch.linspace(-2, 2, 5), torch.linspace(-1, 1, 3)
    cs = cross_section(net, x, u1, u2, a, b)
    assert cs.shape == (3, 3, 5)
    base = (
        x
        - (x.flatten(1) @ u1.flatten())[:, None, None, None] * u1
        - (x.flatten(1) @ u2.flatten())[:, None, None, None] * u2
    )
    f_base = base.flatten(1) @ w.flatten() + bias
    wa, wb = (w * u1).sum(), (w * u2).sum()
    expected = f_base[:, None, None] + b[None, :, None] * wb + a[None, None, :] * wa
    torch.testing.assert_close(cs, expected.detach(), atol=1e-4, rtol=1e-4)
    # distance to the boundary along u of a linear f is |f(x)| / |w . u|, capped at t_max
    f_x = (x.flatten(1) @ w.flatten() + bias).detach()
    m = margins_along(net, x, u2, t_max=1e6, steps=100)
    torch.testing.assert_close(m, (f_x.abs() / wb.abs()).detach(), rtol=1e-3, atol=1e-3)
    # no boundary within reach: not found (inf), never the search's limit read as a distance
    assert torch.all(margins_along(net, x, u2, t_max=1e-3, steps=10) == float("inf"))


def test_a_model_trained_only_on_channel_1_relies_on_channel_1():
    v1, v2 = unit(torch.randn(1024, generator=G)), unit(torch.randn(1024, generator=G))
    data = pair_splits(
        v1.reshape(1, 32, 32),
        v2.reshape(1, 32, 32),
        Shape(1, 32, 32),
        1.0,
        1.0,
        1.0,
        {"train": 2000, "test": 300},
        generator("pair-data", 3),
    )
    x, y = data["train"]
    x = x.clone()
    x[:, 1] = 0  # channel 2 never seen in training
    torch.manual_seed(0)
    net = build_model("mlp", 2, 2)
    train_one(net, x, y, TrainSettings(epochs=5, lr_max=0.05), seed=0)
    u1 = torch.stack([v1.reshape(32, 32), torch.zeros(32, 32)])
    u2 = torch.stack([torch.zeros(32, 32), v2.reshape(32, 32)])
    r = channel_reliance(net, data["test"][0], u1, u2)
    assert r["reliance_deg"] < 10
    # and one that saw only channel 2 relies on it
    x2 = data["train"][0].clone()
    x2[:, 0] = 0
    torch.manual_seed(0)
    net2 = build_model("mlp", 2, 2)
    train_one(net2, x2, y, TrainSettings(epochs=5, lr_max=0.05), seed=0)
    assert channel_reliance(net2, data["test"][0], u1, u2)["reliance_deg"] > 80


class Reads(nn.Module):
    """f = <x, w>: relies on whatever w touches."""

    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x):
        s = (x.flatten(1) * self.w.flatten()).sum(1)
        return torch.stack([-s, s], dim=1)


def test_direction_against_a_block_of_channels():
    # a 4-channel image: channels 0-2 "CIFAR", channel 3 synthetic along v
    u = torch.zeros(4, 32, 32)
    u[3] = unit(torch.randn(32, 32, generator=G))
    x = torch.randn(20, 4, 32, 32, generator=G)
    only_v = direction_vs_channels(Reads(2 * u), x, u, [0, 1, 2])
    assert only_v["reliance_deg"] == pytest.approx(0.0, abs=1e-4)
    cifar = torch.zeros(4, 32, 32)
    cifar[:3] = torch.randn(3, 32, 32, generator=G)
    assert direction_vs_channels(Reads(cifar), x, u, [0, 1, 2])["reliance_deg"] == pytest.approx(
        90.0
    )
    both = direction_vs_channels(Reads(cifar / cifar.norm() + u), x, u, [0, 1, 2])
    assert both["reliance_deg"] == pytest.approx(45.0, abs=1e-3)
