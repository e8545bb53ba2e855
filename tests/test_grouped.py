"""N networks as one grouped network (nadpipe.grouped): for every registry model it covers, the
same outputs as the networks one after another up to float rounding, and the same NADs; the
models it does not cover are said so, and their NADs are computed one network after another."""

from functools import partial

import pytest
import torch
from torch import nn

from nadpipe.grouped import Grouped, NotGroupable
from nadpipe.models import build, build_model
from nadpipe.nads import sample_sensitivities
from nadpipe.settings import REGISTRY_NAMES, ModelSpec, NadSettings, Shape

NOT_COVERED = {"vit_tiny", "mlp_mixer_tiny"}  # attention, layer norm, learned positions


@pytest.mark.parametrize("name", REGISTRY_NAMES)
def test_every_registry_model_it_covers_gives_the_outputs_of_its_networks(name):
    torch.manual_seed(0)
    nets = [build_model(name, 2, 1, {}).eval() for _ in range(3)]
    for net in nets:  # batch norm's statistics as trained networks have them, not 0 and 1
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
    if name in NOT_COVERED:
        with pytest.raises(NotGroupable):
            Grouped(nets)(torch.randn(2, 2, 32, 32))
        return
    x = torch.randn(5, 2, 32, 32)
    out = Grouped(nets)(x)
    with torch.no_grad():
        one_by_one = torch.stack([net(x) for net in nets], 1)
    assert out.shape == (5, 3, 1)
    assert torch.allclose(out, one_by_one, rtol=1e-5, atol=1e-5 * one_by_one.abs().max())


# the transformer at 16 x 16 (a quarter of the probes): it is not grouped, and its patch embedding
# is windowed at any size
@pytest.mark.parametrize(("model", "side"), [("lenet", 32), ("mlp", 32), ("vit_tiny", 16)])
def test_grouped_nads_are_the_nads_of_the_networks_one_after_another(model, side):
    spec = ModelSpec(model, {}, Shape(1, side, side), 1)
    settings = NadSettings(n_networks=6, networks_per_chunk=3, batch_size=512)
    one = sample_sensitivities(partial(build, spec), settings, spec.shape, progress=False)
    grouped = NadSettings(n_networks=6, networks_per_chunk=3, batch_size=512, grouped=True)
    together = sample_sensitivities(partial(build, spec), grouped, spec.shape, progress=False)
    # float rounding apart (a convolution of 3 networks' filters at once sums in its own order)
    scale = one.abs().max()
    assert (together - one).abs().max() <= 1e-4 * scale, (together - one).abs().max() / scale
