"""What a result depends on beyond its config: a user model's code is part of its spec, so that
editing the builder, or a module beside it that the builder imports, reruns what used it."""

import pytest
from conftest import SCHEMA

from nadpipe import config as nc
from nadpipe.grid import Plan
from nadpipe.provenance import source_digest

NETS = """
from torch import nn
from blocks import head


def small_cnn(in_channels, num_classes, width=4):
    return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(), head(width, 1024,
                         num_classes))
"""
BLOCKS = """
from torch import nn


def head(width, pixels, classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(width * pixels, classes))
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the workflow and the command look for user modules there
    (tmp_path / "mynets.py").write_text(NETS)
    (tmp_path / "blocks.py").write_text(BLOCKS)
    return tmp_path


def _jobs(here) -> tuple:
    cfg = {
        "architectures": {"small_cnn": {"model": "mynets:small_cnn"}},
        "nads": {"n_networks": 24},
        "nad_pairs": {"architectures": ["small_cnn", "lenet"], "indices": [0], "seeds": [0]},
    }
    plan = Plan(nc.load_config(cfg, SCHEMA)[0])
    return (
        plan.nad_job("small_cnn"),
        plan.train_job("nad_pairs", "small_cnn", "i0_j0", (0,)),
        plan.train_job("nad_pairs", "lenet", "i0_j0", (0,)),
    )


def test_editing_a_user_model_or_what_it_imports_beside_it_changes_its_jobs(here):
    # b879b52: the spec named the builder only; after an edit, `snakemake -n` had nothing to do
    nad, train, lenet = _jobs(here)
    assert len(train.model.source) == 16 and lenet.model.source == ""  # the registry: nadpipe's
    assert nad.model.source == train.model.source
    (here / "mynets.py").write_text(NETS.replace("width=4", "width=5"))
    nad2, train2, lenet2 = _jobs(here)
    assert nad2 != nad and train2 != train and lenet2 == lenet
    (here / "blocks.py").write_text(BLOCKS + "\n# a comment is an edit too\n")
    _, train3, _ = _jobs(here)
    assert train3.model.source not in (train.model.source, train2.model.source)
    (here / "unrelated.py").write_text("x = 1\n")  # not imported: no change
    assert _jobs(here)[1] == train3


def test_the_digest_of_a_module_that_is_not_a_file_is_empty():
    assert source_digest("lenet") == "" and len(source_digest("json:loads")) == 16
    assert source_digest("json:loads") != source_digest("csv:reader")
    assert source_digest("math:sqrt") == ""  # a built-in module: no source file
