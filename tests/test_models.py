"""Registry models: shapes, the NAD code's layer lists, user models."""

import math
import sys

import pytest
import torch
from torch import nn

from nadpipe.models import (
    DIFFERENCES,
    REGISTRY,
    KwargsError,
    ModelError,
    build_model,
    check_model,
    relu_units,
    resolve_builder,
)
from nadpipe.settings import REGISTRY_NAMES, ModelSpec, Shape


def test_the_registry_is_named_for_the_config():
    assert tuple(REGISTRY) == REGISTRY_NAMES and set(DIFFERENCES) == set(REGISTRY)


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("shape", [(1, 32, 32), (2, 32, 32), (4, 32, 32), (3, 64, 64)])
def test_every_registered_architecture_maps_images_to_logits(name, shape):
    torch.manual_seed(0)
    net = build_model(name, shape[0], 2, size=shape[1:]).eval()
    with torch.no_grad():
        out = net(torch.randn(3, *shape))
    assert out.shape == (3, 2) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "name", ["logreg", "mlp", "lenet", "lenet_nopool", "resnet18", "densenet121"]
)
def test_non_square_and_mnist_sized_inputs(name):
    for size in ((28, 28), (32, 48)):
        net = build_model(name, 1, 3, size=size).eval()
        assert net(torch.randn(2, 1, *size)).shape == (2, 3)


# The NAD repository's models.py, layer by layer (github.com/LTS4/neural-anisotropy-directions):
# (module type, weight shape) of every parametrised module in order, for 1-channel inputs and
# one output, as its NAD scripts build them (LeNet(num_channels=1, num_classes=1), ...).
NAD_CODE = {
    "logreg": [("Linear", (1, 1024))],
    "lenet": [
        ("Conv2d", (6, 1, 5, 5)),
        ("Conv2d", (16, 6, 5, 5)),
        ("Linear", (120, 400)),
        ("Linear", (84, 120)),
        ("Linear", (1, 84)),
    ],
    "vgg11": [
        ("Conv2d", (64, 1, 3, 3)),
        ("BatchNorm2d", (64,)),
        ("Conv2d", (128, 64, 3, 3)),
        ("BatchNorm2d", (128,)),
        ("Conv2d", (256, 128, 3, 3)),
        ("BatchNorm2d", (256,)),
        ("Conv2d", (256, 256, 3, 3)),
        ("BatchNorm2d", (256,)),
        ("Conv2d", (512, 256, 3, 3)),
        ("BatchNorm2d", (512,)),
        ("Conv2d", (512, 512, 3, 3)),
        ("BatchNorm2d", (512,)),
        ("Conv2d", (512, 512, 3, 3)),
        ("BatchNorm2d", (512,)),
        ("Conv2d", (512, 512, 3, 3)),
        ("BatchNorm2d", (512,)),
        ("Linear", (512, 512)),
        ("Linear", (512, 512)),
        ("Linear", (1, 512)),
    ],
}


@pytest.mark.parametrize("name", sorted(NAD_CODE))
def test_registry_models_follow_the_nad_code_layer_by_layer(name):
    net = build_model(name, 1, 1)
    layers = [
        (type(m).__name__, tuple(m.weight.shape))
        for m in net.modules()
        if isinstance(m, nn.Linear | nn.Conv2d | nn.BatchNorm2d)
    ]
    assert layers == NAD_CODE[name]


def nad_code_resnet18_params(c: int = 1, k: int = 1) -> int:
    """Parameters of the NAD code's ResNet18(num_channels=c, num_classes=k), from its layer
    definitions: a 3x3 stem (no bias) and batch norm, BasicBlocks (two 3x3 convolutions with
    batch norm, a 1x1 convolution with batch norm as shortcut when the shape changes), a linear
    layer on 512 features."""
    total = 64 * c * 9 + 2 * 64
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for s in (stride, 1):
            total += cout * cin * 9 + 2 * cout + cout * cout * 9 + 2 * cout
            if s != 1 or cin != cout:
                total += cout * cin + 2 * cout
            cin = cout
    return total + 512 * k + k


def nad_code_densenet121_params(c: int = 1, k: int = 1, growth: int = 32) -> int:
    """Parameters of the NAD code's DenseNet121: a 3x3 stem to 2 * growth, Bottlenecks (batch
    norm, 1x1 to 4 * growth, batch norm, 3x3 to growth), Transitions (batch norm, 1x1 to half)
    between the blocks (6, 12, 24, 16), a final batch norm and linear layer."""
    planes = 2 * growth
    total = planes * c * 9
    for b, n in enumerate((6, 12, 24, 16)):
        for _ in range(n):
            total += 2 * planes + 4 * growth * planes + 2 * 4 * growth + growth * 4 * growth * 9
            planes += growth
        if b < 3:
            out = planes // 2
            total += 2 * planes + planes * out
            planes = out
    return total + 2 * planes + planes * k + k


def test_resnet18_and_densenet121_have_the_nad_code_parameter_counts():
    count = lambda net: sum(p.numel() for p in net.parameters())  # noqa: E731
    assert count(build_model("resnet18", 1, 1)) == nad_code_resnet18_params(1, 1) == 11_168_193
    assert count(build_model("resnet18", 3, 10)) == nad_code_resnet18_params(3, 10)
    assert count(build_model("densenet121", 1, 1)) == nad_code_densenet121_params(1, 1)
    drops = [m for m in build_model("vgg11", 1, 1).modules() if isinstance(m, nn.Dropout)]
    assert len(drops) == 2 and all(d.p == 0.5 for d in drops)


def test_vgg11_uses_the_nad_codes_convolution_initialisation():
    torch.manual_seed(0)
    convs = [m for m in build_model("vgg11", 1, 1).modules() if isinstance(m, nn.Conv2d)]
    for m in convs:  # N(0, 2 / (k * k * out_channels)), bias 0
        expected = (2 / (9 * m.out_channels)) ** 0.5
        assert abs(m.weight.std().item() / expected - 1) < 0.1
        assert torch.count_nonzero(m.bias) == 0


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - {"logreg", "vit_tiny", "mlp_mixer_tiny"}))
def test_nonlinearities_are_distinct_relu_modules(name):
    # activation patterns are read through hooks on ReLU modules, one per use
    relus = [m for m in build_model(name, 1, 1).modules() if isinstance(m, nn.ReLU)]
    assert relus and len({id(m) for m in relus}) == len(relus)


def test_relu_units_counts_each_units_output():
    x = torch.randn(3, 1, 32, 32)
    assert relu_units(build_model("mlp", 1, 2, {"hidden": [7, 5]}), x) == 12
    assert relu_units(build_model("lenet", 1, 2), x) == 6 * 28 * 28 + 16 * 10 * 10 + 120 + 84
    assert relu_units(build_model("vit_tiny", 1, 2), x) == 0


def test_mlp_hidden_widths_come_from_kwargs():
    net = build_model("mlp", 2, 2, {"hidden": [7, 5, 3]})
    widths = [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]
    assert widths == [7, 5, 3, 2]


def test_an_mlp_without_hidden_layers_is_a_linear_model_and_passes_its_check():
    # 10c1e0f refused hidden: [] as "a list; it takes a list of integers" (0.12 ran it)
    spec = ModelSpec("mlp", {"hidden": []}, Shape(1, 32, 32), 2)
    check_model(spec)
    widths = [m.out_features for m in build_model("mlp", 1, 2, {"hidden": []}).modules()
              if isinstance(m, nn.Linear)]  # fmt: skip
    assert widths == [2]
    with pytest.raises(KwargsError, match=r"hidden is 32, an integer; it takes a list of"):
        check_model(ModelSpec("mlp", {"hidden": 32}, Shape(1, 32, 32), 2))


def test_user_model_from_module_path(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "from torch import nn\n"
        "def tiny(in_channels, num_classes, width=4):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, width), nn.ReLU(),\n"
        "                         nn.Linear(width, num_classes))\n"
        "def sized(in_channels, num_classes, input_size):\n"
        "    h, w = input_size\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * h * w, num_classes))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    net = build_model("my_models:tiny", 2, 2, {"width": 6})
    assert net[1].out_features == 6
    # a builder that takes input_size gets it; one that does not is called without it
    check_model(ModelSpec("my_models:sized", {}, Shape(3, 28, 20), 4))
    with pytest.raises(ModelError, match=r"takes no input_size: for inputs other than 32x32"):
        check_model(ModelSpec("my_models:tiny", {}, Shape(1, 28, 28), 2))
    with pytest.raises(ModelError, match="no callable 'nope'"):
        resolve_builder("my_models:nope")
    sys.modules.pop("my_models", None)


def test_unknown_models_are_named_in_the_error():
    with pytest.raises(ModelError, match="unknown model 'lenet5'"):
        resolve_builder("lenet5")
    with pytest.raises(ModelError, match="cannot import module 'no_such_pkg.models'"):
        resolve_builder("no_such_pkg.models:net")


@pytest.mark.parametrize("name", ["vit_tiny", "mlp_mixer_tiny"])
def test_attention_and_mixer_models_run_through_nads_training_and_the_measures(name):
    from functools import partial

    from nadpipe.data import pair_splits
    from nadpipe.evaluate import Context, geometry
    from nadpipe.io import generator
    from nadpipe.models import build
    from nadpipe.nads import batched_sensitivities, compute_nads, dipole_plan, draw_networks
    from nadpipe.settings import AnalysisSettings, NadSettings, TrainSettings
    from nadpipe.train import train_one

    shape = Shape(1, 16, 16)  # 4 x 4 patches of 4 x 4: all that is asserted holds at any size
    spec = ModelSpec(name, {}, shape, 1)
    art = compute_nads(
        partial(build, spec), NadSettings("gradient", n_networks=24), shape, progress=False
    )
    assert torch.isfinite(art["vectors"]).all() and art["eigenvalues"][0] > 0
    # the dipole: windowed where the model allows (the patch embedding), equal to the plain path
    settings = NadSettings(n_networks=2)
    nets = draw_networks(partial(build, spec), settings, range(2))
    x0 = torch.randn(1, *shape, generator=torch.Generator().manual_seed(0))
    plan = dipole_plan(nets[0], settings, shape, "cpu")
    windowed = batched_sensitivities(nets, x0, "dipole", 100.0, 1024, plan)
    plain = batched_sensitivities(nets, x0, "dipole", 100.0, 1024)
    torch.testing.assert_close(windowed, plain, rtol=1e-4, atol=1e-5 * plain.abs().max().item())
    # a NAD-pair model trains, and the geometry measure says the transition counts do not apply
    v = art["vectors"][0].reshape(shape)
    data = pair_splits(v, v, shape, 1.0, 1.0, 1.0, {"train": 256, "test": 64}, generator("p"))
    torch.manual_seed(0)
    net = build_model(name, 2, 2, size=shape.size)
    hist = train_one(net, *data["train"], TrainSettings(epochs=1, lr_max=0.05), seed=0)
    assert math.isfinite(hist[0]["loss"])
    zero = torch.zeros(shape)
    ctx = Context(
        data, {"u1": torch.cat([v, zero]), "u2": torch.cat([zero, v]), "eps1": 1.0, "eps2": 1.0},
        art["vectors"], tuple(shape),
        AnalysisSettings(n_points=8, margin_steps=4), ("x", 0, 0, 0),
    )  # fmt: skip
    row, arrays = geometry(net, ctx)
    assert row["relu_units"] == 0 and all(
        math.isnan(row[f"transitions_{k}"]) for k in ("same_class", "diff_class", "random")
    )
    assert 0 <= row["reliance_deg"] <= 90 and row["jacobian_norm_test"] >= 0
    assert arrays["values"].shape == (2, 41, 41)
