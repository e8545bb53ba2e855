"""The NAD estimators' registry (nadpipe.estimators) is what every interface offers: each entry
is computed by nadpipe.nads, the schema and the command accept exactly those names, and a
setting only one estimator reads is warned about under another."""

import dataclasses
import re

import pytest
import torch
from conftest import SCHEMA
from torch import nn

from nadpipe import config as nc
from nadpipe.cli import parser
from nadpipe.estimators import ESTIMATORS
from nadpipe.nads import compute_nads
from nadpipe.settings import NadSettings, Shape

SHAPE = Shape(1, 4, 4)
U = torch.linalg.qr(torch.randn(16, 2, generator=torch.Generator().manual_seed(0)))[0].T


class RandomLinear(nn.Module):
    """f(x) = a1 3 u1.x + a2 u2.x: every estimator's NADs are u1, u2 (a linear model)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(2))

    def forward(self, x):
        return ((x.flatten(1) @ U.T) * (self.a * torch.tensor([3.0, 1.0]))).sum(1, keepdim=True)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_registered_estimator_is_computed(name):
    art = compute_nads(RandomLinear, NadSettings(name, n_networks=400), SHAPE, progress=False)
    for k in range(2):
        assert abs(art["vectors"][k].double() @ U[k].double()) > 0.99
    assert art["settings"]["estimator"] == name


def test_an_estimator_without_its_computation_fails_loudly(monkeypatch):
    # b879b52: the computation was an `if estimator == "gradient"` with the dipole as
    # fall-through, so an entry registered without one silently returned the dipole's NADs
    from nadpipe.estimators import Estimator
    from nadpipe.nads import NadError, computation

    monkeypatch.setitem(ESTIMATORS, "secant", Estimator("a new one"))
    with pytest.raises(NadError, match=r"'secant' \(nadpipe.estimators\) has no computation"):
        compute_nads(RandomLinear, NadSettings("secant", n_networks=4), SHAPE, progress=False)
    with pytest.raises(ValueError, match="estimator must be one of " + ", ".join(ESTIMATORS)):
        NadSettings("nope")  # an unknown name: refused where the settings are made
    with pytest.raises(NadError, match="unknown NAD estimator 'nope'; the registered ones"):
        computation("nope")


def test_the_schema_and_the_command_offer_exactly_the_registry():
    schema = nc.load_schema(SCHEMA)
    assert schema["$defs"]["nad_settings"]["properties"]["estimator"]["enum"] == list(ESTIMATORS)
    sub = parser()._subparsers._group_actions[0].choices["nads"]
    (action,) = [a for a in sub._actions if a.dest == "estimator"]
    assert list(action.choices) == list(ESTIMATORS)
    assert all(e.about in action.help for e in ESTIMATORS.values())
    fields = {f.name for f in dataclasses.fields(NadSettings)}
    assert all(set(e.reads) <= fields for e in ESTIMATORS.values())
    valid = re.escape(str(list(ESTIMATORS)))
    said = r"'nads.estimator': 'finite_difference' is not one of " + valid
    with pytest.raises(nc.ConfigError, match=said):
        nc.load_config({"nads": {"estimator": "finite_difference"}}, SCHEMA)


def test_a_setting_another_estimator_reads_is_warned_about():
    for name, e in ESTIMATORS.items():
        others = {k for o in ESTIMATORS.values() for k in o.reads} - set(e.reads)
        for key in others:
            value = {"step": 50.0, "windowed": False, "grouped": True}[key]
            _, warnings = nc.load_config({"nads": {"estimator": name, key: value}}, SCHEMA)
            assert any(f"'nads.{key}' has no effect" in w and f"'{name}'" in w for w in warnings)
