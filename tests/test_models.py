import sys

import pytest
import torch
from torch import nn

from nadpipe.models import REGISTRY, ModelError, build_model, check_output_shape, resolve_builder


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("in_channels", [1, 2, 4])
def test_every_registered_architecture_maps_images_to_logits(name, in_channels):
    torch.manual_seed(0)
    net = build_model(name, in_channels, 2).eval()
    with torch.no_grad():
        out = net(torch.randn(3, in_channels, 32, 32))
    assert out.shape == (3, 2) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - {"logreg"}))
def test_nonlinearities_are_distinct_relu_modules(name):
    # activation patterns are read through hooks on ReLU modules, one per use
    relus = [m for m in build_model(name, 1, 1).modules() if isinstance(m, nn.ReLU)]
    assert relus and len({id(m) for m in relus}) == len(relus)


def test_mlp_hidden_widths_come_from_kwargs():
    net = build_model("mlp", 2, 2, {"hidden": [7, 5, 3]})
    widths = [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]
    assert widths == [7, 5, 3, 2]


def test_user_model_from_module_path(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "from torch import nn\n"
        "def tiny(in_channels, num_classes, width=4):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, width), nn.ReLU(),\n"
        "                         nn.Linear(width, num_classes))\n"
        "def wrong(in_channels, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    net = build_model("my_models:tiny", 2, 2, {"width": 6})
    assert net[1].out_features == 6
    with pytest.raises(ModelError, match=r"expected \(2, 2\)"):
        check_output_shape(build_model("my_models:wrong", 2, 2), "my_models:wrong", 2, 2)
    with pytest.raises(ModelError, match="no callable 'nope'"):
        resolve_builder("my_models:nope")
    sys.modules.pop("my_models", None)


def test_unknown_models_are_named_in_the_error():
    with pytest.raises(ModelError, match="unknown model 'lenet5'"):
        resolve_builder("lenet5")
    with pytest.raises(ModelError, match="cannot import module 'no_such_pkg.models'"):
        resolve_builder("no_such_pkg.models:net")
