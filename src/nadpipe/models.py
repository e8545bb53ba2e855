"""Architectures by name: registry models and user models given as `package.module:callable`.

A builder is called as `builder(in_channels=, num_classes=, input_size=(H, W), **kwargs)` and
returns a module mapping (batch, in_channels, H, W) to (batch, num_classes); a user builder that
takes no `input_size` is called without it (it then has to fit the inputs it is given). Registry
models follow the NAD paper's code (github.com/LTS4/neural-anisotropy-directions, models.py)
layer by layer; their non-linearities are `nn.ReLU` modules, one instance per use, so that
activation patterns can be read through hooks. Differences, all deliberate, are listed in
`DIFFERENCES` and the README.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from torch import nn

from .backend import birth_device
from .provenance import importable_here
from .settings import ModelSpec, Shape


class ModelError(ValueError):
    """A model name, user callable or its behaviour does not fit what nadpipe needs."""


def logreg(in_channels: int, num_classes: int, input_size=(32, 32)) -> nn.Module:
    """Logistic regression on the flattened image (the NAD code's LogReg)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * math.prod(input_size), num_classes))


def mlp(
    in_channels: int, num_classes: int, input_size=(32, 32), hidden: Sequence[int] = (100, 20)
) -> nn.Module:
    """Fully connected ReLU network on the flattened image (underspecification paper: hidden
    widths 100, 20)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_channels * math.prod(input_size)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def lenet(in_channels: int, num_classes: int, input_size=(32, 32), pool: bool = True) -> nn.Module:
    """LeNet-5 with max-pooling and ReLU, as the NAD code's LeNet. `pool=False` removes both
    max-pools; the first linear layer then takes all 16 x (H-8) x (W-8) features."""

    def side(n: int) -> int:
        return ((n - 4) // 2 - 4) // 2 if pool else n - 8

    pooling = [nn.MaxPool2d(2)] if pool else []
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5),
        nn.ReLU(),
        *pooling,
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        *[nn.MaxPool2d(2) for _ in pooling],
        nn.Flatten(),
        nn.Linear(16 * side(input_size[0]) * side(input_size[1]), 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def lenet_nopool(in_channels: int, num_classes: int, input_size=(32, 32)) -> nn.Module:
    """LeNet without its two max-pools (the NAD paper's test of pooling as a source of
    anisotropy)."""
    return lenet(in_channels, num_classes, input_size, pool=False)


class GlobalAvgPool(nn.Module):
    """The mean over height and width, (n, C, H, W) -> (n, C, 1, 1): AdaptiveAvgPool2d(1)'s
    values, with a backward that is deterministic on CUDA (AdaptiveAvgPool2d's is not, so
    gpus.deterministic could not train a model that has it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((2, 3), keepdim=True)


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


def resnet18(
    in_channels: int, num_classes: int, input_size=(32, 32), pool: bool = True
) -> nn.Module:
    """ResNet-18, CIFAR variant (3x3 stride-1 stem, no max-pool), as the NAD code's ResNet18;
    its final avg_pool2d(4) is a global average pool on 32x32 inputs, here a mean over H, W so
    other sizes work (`GlobalAvgPool`). `pool=False` drops it: the linear layer takes all
    512 x H/8 x W/8 features."""
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
        layers += [GlobalAvgPool(), nn.Flatten(), nn.Linear(512, num_classes)]
    else:
        h, w = (math.ceil(n / 8) for n in input_size)
        layers += [nn.Flatten(), nn.Linear(512 * h * w, num_classes)]
    return nn.Sequential(*layers)


def resnet18_nopool(in_channels: int, num_classes: int, input_size=(32, 32)) -> nn.Module:
    """ResNet-18 (CIFAR variant) without its global average pool (strided convolutions stay)."""
    return resnet18(in_channels, num_classes, input_size, pool=False)


def vgg11(in_channels: int, num_classes: int, input_size=(32, 32)) -> nn.Module:
    """VGG-11 with batch norm as the NAD code's VGG11_bn (the one its NAD script uses): 3x3
    convolutions, batch norm, ReLU and five max-pools, a classifier of three linear layers
    (512, 512, classes) with ReLU and dropout, and the code's own convolution initialisation,
    weight ~ N(0, 2 / (k * k * out_channels)) and bias 0 (its linear layers keep PyTorch's)."""
    layers: list[nn.Module] = []
    cin = in_channels
    for v in [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU()]
            cin = int(v)
    features = 512 * (input_size[0] // 32) * (input_size[1] // 32)
    layers += [
        nn.Flatten(),
        nn.Linear(features, 512),
        nn.ReLU(),
        nn.Dropout(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Dropout(),
        nn.Linear(512, num_classes),
    ]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / n))
            nn.init.zeros_(m.bias)
    return net


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


def densenet121(
    in_channels: int, num_classes: int, input_size=(32, 32), growth: int = 32
) -> nn.Module:
    """DenseNet-121, CIFAR variant, as the NAD code's DenseNet121: 3x3 stem, blocks
    (6, 12, 24, 16), compression 0.5; its final avg_pool2d(4) is global on 32x32 inputs, here
    a mean over H, W (`GlobalAvgPool`)."""
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
        GlobalAvgPool(),
        nn.Flatten(),
        nn.Linear(cin, num_classes),
    ]
    return nn.Sequential(*layers)


def _patches(input_size: Sequence[int], patch: int) -> int:
    """The number of non-overlapping patch x patch patches of an input; an error unless they
    tile it."""
    h, w = input_size
    if h % patch or w % patch:
        raise ValueError(f"input size {h}x{w} is not a multiple of the patch size {patch}")
    return (h // patch) * (w // patch)


class _PatchEmbed(nn.Module):
    """Non-overlapping patches to tokens (batch, patches, dim), plus learned positions."""

    def __init__(self, in_channels: int, dim: int, patch: int, input_size: Sequence[int]):
        super().__init__()
        tokens = _patches(input_size, patch)
        self.proj = nn.Conv2d(in_channels, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos


class _ViT(nn.Module):
    def __init__(self, in_channels, num_classes, input_size, patch, dim, depth, heads):
        super().__init__()
        self.embed = _PatchEmbed(in_channels, dim, patch, input_size)
        layer = nn.TransformerEncoderLayer(
            dim,
            heads,
            2 * dim,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(x))).mean(1))


def vit_tiny(
    in_channels: int,
    num_classes: int,
    input_size=(32, 32),
    patch: int = 4,
    dim: int = 64,
    depth: int = 3,
    heads: int = 4,
) -> nn.Module:
    """A small vision transformer: 4x4 patches, learned positions, pre-norm encoder layers
    (multi-head attention, GELU MLP), mean-pooled tokens, a linear head. No ReLU: the
    activation-transition counts do not apply (recorded as NaN)."""
    return _ViT(in_channels, num_classes, input_size, patch, dim, depth, heads)


class _MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, token_hidden: int, channel_hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(
            nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens)
        )
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(
            nn.Linear(dim, channel_hidden), nn.GELU(), nn.Linear(channel_hidden, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, tokens, dim)
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class _Mixer(nn.Module):
    def __init__(self, in_channels, num_classes, input_size, patch, dim, depth):
        super().__init__()
        tokens = _patches(input_size, patch)
        self.proj = nn.Conv2d(in_channels, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[_MixerBlock(tokens, dim, dim, 2 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(tokens)).mean(1))


def mlp_mixer_tiny(
    in_channels: int,
    num_classes: int,
    input_size=(32, 32),
    patch: int = 4,
    dim: int = 64,
    depth: int = 3,
) -> nn.Module:
    """A small MLP-Mixer: 4x4 patches, blocks of token-mixing and channel-mixing MLPs (GELU)
    with layer norm and skips, mean-pooled tokens, a linear head. No ReLU (transitions: NaN)."""
    return _Mixer(in_channels, num_classes, input_size, patch, dim, depth)


REGISTRY: dict[str, Callable[..., nn.Module]] = {
    "logreg": logreg,
    "mlp": mlp,
    "lenet": lenet,
    "lenet_nopool": lenet_nopool,
    "resnet18": resnet18,
    "resnet18_nopool": resnet18_nopool,
    "vgg11": vgg11,
    "densenet121": densenet121,
    "vit_tiny": vit_tiny,
    "mlp_mixer_tiny": mlp_mixer_tiny,
}

# How each registry model differs from the NAD code's (models.py of the NAD repository)
DIFFERENCES = {
    "logreg": "none",
    "mlp": "not in the NAD code (the underspecification paper's MLP)",
    "lenet": "none (ReLU and max-pool as modules instead of functions: the same maps)",
    "lenet_nopool": "not in the NAD code (LeNet without its max-pools, for the pooling test)",
    "resnet18": "global pool as a mean over H, W (its avg_pool2d(4) on 32x32 inputs; a mean is "
    "deterministic on CUDA)",
    "resnet18_nopool": "not in the NAD code (ResNet-18 without its global pool)",
    "vgg11": "its trailing AvgPool2d(kernel 1, stride 1), an identity, is left out",
    "densenet121": "global pool as a mean over H, W (its avg_pool2d(4) on 32x32 inputs; a mean "
    "is deterministic on CUDA)",
    "vit_tiny": "not in the NAD code",
    "mlp_mixer_tiny": "not in the NAD code",
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
    here = importable_here()
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 -- an import can fail in any way
        raise ModelError(
            f"user model {model!r}: cannot import module {module_name!r} "
            f"({type(e).__name__}: {e}); it is looked for on the import path and in the "
            f"working directory {here}"
        ) from e
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ModelError(f"user model {model!r}: {module_name!r} has no callable {attr!r}")
    return builder


def _takes_input_size(builder: Callable) -> bool:
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # some callables have no signature
        return False
    return "input_size" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def takes_arguments(builder: Callable) -> bool:
    """Whether `builder` is a builder nadpipe calls as builder(in_channels=C, num_classes=K,
    [input_size=(H, W)], **kwargs); False for one without parameters, which makes its one-logit
    network as it is (what `compute_nads` and `nadpipe nads` accept too)."""
    try:
        return bool(inspect.signature(builder).parameters)
    except (TypeError, ValueError):  # some callables have no signature: call them as builders
        return True


def call_builder(builder: Callable, shape: Shape, classes: int, kwargs: dict, name: str):
    """`builder`'s module for inputs of `shape` and `classes` outputs. A builder without
    parameters serves a single logit without kwargs (NADs) only; anything else is refused in
    words that say which signature nadpipe needs."""
    if not takes_arguments(builder):
        if classes == 1 and not kwargs:
            return builder()
        use = "training (2 outputs)" if classes != 1 else "kwargs"
        raise ModelError(
            f"model {name!r} takes no arguments, so it makes one network as it is (enough for "
            f"NADs: compute_nads, nadpipe nads); for {use} nadpipe calls it as "
            f"{name.rpartition(':')[2]}(in_channels, num_classes, **kwargs): give it those "
            "parameters"
        )
    extra = {"input_size": tuple(shape.size)} if _takes_input_size(builder) else {}
    return builder(in_channels=shape.c, num_classes=classes, **extra, **kwargs)


def build(spec: ModelSpec) -> nn.Module:
    """A fresh module of `spec` on the CPU, initialised from torch's global generator (the same
    numbers whatever device the job then moves it to: nadpipe.backend), or on the device of an
    enclosing `nadpipe.backend.born_on` (the NADs' networks)."""

    builder = resolve_builder(spec.model)
    with torch.device(birth_device()):
        return call_builder(builder, spec.shape, spec.classes, spec.kwargs, spec.model)


def build_model(
    model: str, in_channels: int, num_classes: int, kwargs: dict | None = None, size=(32, 32)
) -> nn.Module:
    """Build `model` for inputs (batch, in_channels, *size) and `num_classes` outputs."""
    return build(ModelSpec(model, dict(kwargs or {}), Shape(in_channels, *size), num_classes))


class KwargsError(ModelError):
    """The builder does not take the keyword arguments it was given, or fails with them (and
    not without them); `key` names the one at fault when one alone is."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def _call_forward(net: nn.Module, x: torch.Tensor, spec: ModelSpec, mode: str) -> torch.Tensor:
    try:
        out = net(x)
    except Exception as e:  # noqa: BLE001 -- report whatever the user's forward raised
        hint = ""
        if "channels" in str(e) and ("expected" in str(e) or "Expected" in str(e)):
            hint = f" (it seems to need other input channels than {spec.shape.c})"
        raise ModelError(
            f"model {spec.model!r} raised {type(e).__name__} inside forward ({mode} mode) on an "
            f"input of shape {tuple(x.shape)}: {e}{hint}"
        ) from e
    if not isinstance(out, torch.Tensor):
        kind = type(out).__name__
        raise ModelError(
            f"model {spec.model!r} returned a {kind} in {mode} mode, not a tensor of logits "
            f"(batch, {spec.classes})"
        )
    if tuple(out.shape) != (len(x), spec.classes):
        raise ModelError(
            f"model {spec.model!r} maps {tuple(x.shape)} to {tuple(out.shape)} in {mode} mode, "
            f"expected ({len(x)}, {spec.classes})"
        )
    if not torch.isfinite(out).all():
        raise ModelError(
            f"model {spec.model!r} returns values that are not finite (NaN or inf) in {mode} "
            f"mode on standard normal inputs of shape {tuple(x.shape)}: training, evaluation "
            "and NADs would be meaningless"
        )
    return out


def check_model(spec: ModelSpec) -> None:
    """Build `spec` and run it as nadpipe will: eval mode, then one training step (train mode,
    forward and backward), its outputs finite. Raise `KwargsError` when the builder rejects its
    keyword arguments, or the model fails with them and works without them (naming the one at
    fault when one alone is), `ModelError` saying what the model did otherwise."""
    try:
        _check(spec)
    except KwargsError:
        raise
    except ModelError as e:
        if not spec.kwargs or not _works(replace(spec, kwargs={})):
            raise
        key = next(
            (
                k
                for k in spec.kwargs
                if _works(replace(spec, kwargs={a: v for a, v in spec.kwargs.items() if a != k}))
            ),
            None,
        )
        value = f" ({key}={spec.kwargs[key]!r})" if key else ""
        raise KwargsError(f"{e}; it works without its kwargs{value}", key) from e


def _works(spec: ModelSpec) -> bool:
    try:
        _check(spec)
    except ModelError:
        return False
    return True


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _kind(value) -> str:
    """What `value` is, in a config's words ("a list of integers", "an integer")."""
    if isinstance(value, list | tuple):
        inner = {_kind(v).removeprefix("an ").removeprefix("a ") for v in value}
        return f"a list of {inner.pop()}s" if len(inner) == 1 else "a list"
    return next((k for t, k in _KINDS.items() if type(value) is t), type(value).__name__)


def _check_kwarg_kinds(spec: ModelSpec, builder) -> None:
    """A kwarg of another kind than the builder's default for it (hidden: 32 where (100, 20)
    is the default) is refused in those words, before torch's ("'int' object is not
    iterable")."""
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return
    for key, value in spec.kwargs.items():
        default = params[key].default if key in params else inspect.Parameter.empty
        if default is inspect.Parameter.empty or default is None:
            continue
        want, given = _kind(default), _kind(value)
        empty = isinstance(value, list | tuple) and not value  # of any kind: hidden [] is linear
        if empty and want.startswith("a list"):
            continue
        if want != given and not (want == "a number" and given == "an integer"):
            example = list(default) if isinstance(default, tuple) else default
            raise KwargsError(
                f"model {spec.model!r}: {key} is {value!r}, {given}; it takes {want} "
                f"(its default: {example!r})",
                key,
            )


def _check(spec: ModelSpec) -> None:
    builder = resolve_builder(spec.model)
    _check_kwarg_kinds(spec, builder)
    try:
        with warnings.catch_warnings():  # a layer sized to nothing by the shape: the forward
            # below says so as an error that names the model, so torch's warning is noise
            warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
            net = build(spec)
    except TypeError as e:
        text = str(e)
        if "unexpected keyword argument" in text or "required positional argument" in text:
            unexpected = re.search(r"unexpected keyword argument '(\w+)'", text)
            raise KwargsError(f"model {spec.model!r}: {text}", unexpected and unexpected[1]) from e
        raise ModelError(f"model {spec.model!r}: the builder raised TypeError: {text}") from e
    except ModelError:  # said in nadpipe's words already (a builder without parameters)
        raise
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"model {spec.model!r}: the builder raised {type(e).__name__}: {e}") from e
    if not isinstance(net, nn.Module):
        raise ModelError(
            f"model {spec.model!r}: {getattr(builder, '__name__', builder)!s} returned a "
            f"{type(net).__name__}, not a torch.nn.Module"
        )
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, *spec.shape, generator=gen, device=gen.device)
    try:
        _run_check(net, x, spec)
    except ModelError as e:
        if spec.shape.size != (32, 32) and not _takes_input_size(builder):
            raise ModelError(
                f"{e} (its builder takes no input_size: for inputs other than 32x32 it must "
                f"accept input_size=(H, W), here {tuple(spec.shape.size)})"
            ) from e
        raise


def _run_check(net: nn.Module, x: torch.Tensor, spec: ModelSpec) -> None:
    with torch.random.fork_rng(devices=[]):
        net.eval()
        with torch.no_grad():
            _call_forward(net, x, spec, "eval")
        net.train()
        out = _call_forward(net, x, spec, "train")
        if not any(p.requires_grad for p in net.parameters()):
            raise ModelError(
                f"model {spec.model!r} has no parameter that receives a gradient: it cannot be "
                "trained"
            )
        try:
            out.float().logsumexp(1).mean().backward()
        except Exception as e:  # noqa: BLE001
            raise ModelError(
                f"model {spec.model!r}: the backward pass of a training step raised "
                f"{type(e).__name__}: {e}"
            ) from e
    if not any(p.grad is not None for p in net.parameters()):
        raise ModelError(
            f"model {spec.model!r}: no parameter received a gradient in a training step (is the "
            "output detached from them?): it cannot be trained"
        )


def relu_units(net: nn.Module, x: torch.Tensor) -> int:
    """How many ReLU units (outputs of nn.ReLU modules) one input shaped like `x[0]` passes
    through (counted on zeros like `x[:1]`, on `x`'s device)."""
    count = 0

    def hook(_m, _i, out):
        nonlocal count
        count += out[0].numel()

    hooks = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            was = net.training
            net.eval()
            net(torch.zeros_like(x[:1]))
            net.train(was)
    finally:
        for h in hooks:
            h.remove()
    return count
