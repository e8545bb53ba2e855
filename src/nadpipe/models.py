"""Architectures by name: CIFAR-sized registry models and user models as `module:callable`.

Every model maps (batch, in_channels, 32, 32) to (batch, num_classes). Non-linearities are
`nn.ReLU` modules, one instance per use, so activation patterns can be read through hooks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import torch
from torch import nn

IMAGE_SIZE = 32


class ModelError(ValueError):
    """A model name, user callable or its output does not fit what nadpipe needs."""


def logreg(in_channels: int, num_classes: int) -> nn.Module:
    """Logistic regression on the flattened image."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * IMAGE_SIZE**2, num_classes))


def mlp(in_channels: int, num_classes: int, hidden: Sequence[int] = (100, 20)) -> nn.Module:
    """Fully connected ReLU network on the flattened image (paper: hidden 100, 20)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_channels * IMAGE_SIZE**2
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def lenet(in_channels: int, num_classes: int, pool: bool = True) -> nn.Module:
    """LeNet-5 with max-pooling and ReLU, as in the NAD paper's code. `pool=False` removes both
    max-pools; the first linear layer then takes all 16x24x24 features."""
    pooling = [nn.MaxPool2d(2)] if pool else []
    features = 16 * 5 * 5 if pool else 16 * 24 * 24
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5),
        nn.ReLU(),
        *pooling,
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        *[nn.MaxPool2d(2) for _ in pooling],
        nn.Flatten(),
        nn.Linear(features, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def lenet_nopool(in_channels: int, num_classes: int) -> nn.Module:
    """LeNet without its two max-pools (the NAD paper's test of pooling as a source of
    anisotropy)."""
    return lenet(in_channels, num_classes, pool=False)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + self.shortcut(x))


def resnet18(in_channels: int, num_classes: int, pool: bool = True) -> nn.Module:
    """ResNet-18, CIFAR variant: 3x3 stride-1 stem and no max-pool. `pool=False` drops the
    global average pool; the linear layer then takes all 512x4x4 features."""
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
    ]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
        cin = cout
    if pool:
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    else:
        layers += [nn.Flatten(), nn.Linear(512 * 4 * 4, num_classes)]
    return nn.Sequential(*layers)


def resnet18_nopool(in_channels: int, num_classes: int) -> nn.Module:
    """ResNet-18 (CIFAR variant) without its global average pool: the linear layer takes the
    512x4x4 features (strided convolutions stay)."""
    return resnet18(in_channels, num_classes, pool=False)


def vgg11(in_channels: int, num_classes: int) -> nn.Module:
    """VGG-11 with batch norm, CIFAR variant: one linear classifier on the 512x1x1 features."""
    layers: list[nn.Module] = []
    cin = in_channels
    for v in [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU()]
            cin = int(v)
    layers += [nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth),
            nn.ReLU(),
            nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.body(x), x], dim=1)


def densenet121(in_channels: int, num_classes: int, growth: int = 32) -> nn.Module:
    """DenseNet-121, CIFAR variant: 3x3 stem, blocks (6, 12, 24, 16), compression 0.5."""
    cin = 2 * growth
    layers: list[nn.Module] = [nn.Conv2d(in_channels, cin, 3, padding=1, bias=False)]
    blocks = (6, 12, 24, 16)
    for b, n in enumerate(blocks):
        for _ in range(n):
            layers.append(_DenseLayer(cin, growth))
            cin += growth
        if b < len(blocks) - 1:
            cout = cin // 2
            layers += [
                nn.BatchNorm2d(cin),
                nn.ReLU(),
                nn.Conv2d(cin, cout, 1, bias=False),
                nn.AvgPool2d(2),
            ]
            cin = cout
    layers += [
        nn.BatchNorm2d(cin),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(cin, num_classes),
    ]
    return nn.Sequential(*layers)


REGISTRY: dict[str, Callable[..., nn.Module]] = {
    "logreg": logreg,
    "mlp": mlp,
    "lenet": lenet,
    "lenet_nopool": lenet_nopool,
    "resnet18": resnet18,
    "resnet18_nopool": resnet18_nopool,
    "vgg11": vgg11,
    "densenet121": densenet121,
}


def resolve_builder(model: str) -> Callable[..., nn.Module]:
    """The builder for a registry name or a `package.module:callable` path."""
    if model in REGISTRY:
        return REGISTRY[model]
    if ":" not in model:
        raise ModelError(
            f"unknown model {model!r}: use one of {sorted(REGISTRY)} or 'package.module:callable'"
        )
    module_name, _, attr = model.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelError(f"user model {model!r}: cannot import module {module_name!r} ({e})") from e
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ModelError(f"user model {model!r}: {module_name!r} has no callable {attr!r}")
    return builder


def build_model(
    model: str, in_channels: int, num_classes: int, kwargs: dict | None = None
) -> nn.Module:
    """Build `model` for inputs (batch, in_channels, 32, 32) and `num_classes` outputs.

    User callables are called as `builder(in_channels=..., num_classes=..., **kwargs)`.
    """
    builder = resolve_builder(model)
    return builder(in_channels=in_channels, num_classes=num_classes, **(kwargs or {}))


def check_output_shape(net: nn.Module, model: str, in_channels: int, num_classes: int) -> None:
    """Raise `ModelError` unless `net` maps (2, in_channels, 32, 32) to (2, num_classes)."""
    was_training = net.training
    net.eval()
    with torch.no_grad():
        out = net(torch.zeros(2, in_channels, IMAGE_SIZE, IMAGE_SIZE))
    net.train(was_training)
    if tuple(out.shape) != (2, num_classes):
        raise ModelError(
            f"model {model!r} maps (2, {in_channels}, 32, 32) to {tuple(out.shape)}, "
            f"expected (2, {num_classes})"
        )
