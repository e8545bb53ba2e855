import copy

import pytest
import yaml
from conftest import REPO, SCHEMA

from nadpipe import config as nc


def default_config():
    return yaml.safe_load((REPO / "config.yaml").read_text())


def load(cfg):
    return nc.load_config(cfg, SCHEMA)


def with_change(path, value):
    cfg = default_config()
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return cfg


def test_default_and_paper_configs_are_valid():
    cfg = load(default_config())
    assert cfg["nad_pairs"]["train"]["grad_clip"] == 0.5
    paper = load(yaml.safe_load((REPO / "configs" / "paper_sec3.yaml").read_text()))
    assert paper["nad_pairs"]["architectures"] == ["mlp", "lenet", "resnet18"]
    assert nc.train_settings(paper, "nad_pairs", "resnet18").epochs == 30
    assert nc.train_settings(paper, "nad_pairs", "lenet").epochs == 50
    assert len(nc.pair_cells(paper)) == 3 * len(paper["nad_pairs"]["indices"]) ** 2 * 3


def test_defaults_are_filled_from_the_schema():
    cfg = load({"nad_pairs": {"architectures": ["lenet"]}})
    assert cfg["nads"]["estimator"] == "dipole" and cfg["nads"]["step"] == 100.0
    assert cfg["nad_pairs"]["eps1"] == 1.0 and cfg["nad_pairs"]["eps2"] == 0.5
    assert cfg["nad_pairs"]["n_train"] == 10000 and cfg["nad_pairs"]["train"]["batch_size"] == 128
    assert cfg["analysis"]["cross_section"] == {
        "n_points": 2,
        "range": 3.0,
        "resolution": 41,
        "pairs": None,
    }
    assert cfg["analysis"]["transitions"]["n_points"] == 256
    assert cfg["analysis"]["margin_steps"] == 200
    assert nc.arch_entry(cfg, "lenet") == {
        "model": "lenet",
        "kwargs": {},
        "nads_from": None,
        "nads": {},
    }


def test_loading_does_not_modify_the_input():
    cfg = default_config()
    before = copy.deepcopy(cfg)
    load(cfg)
    assert cfg == before


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ["nad_pairs", "architectures"],
            ["lenet", "resnet"],
            r"nad_pairs.architectures.*unknown architecture 'resnet'.*did you mean 'resnet18'",
        ),
        (
            ["nad_pairs", "indices"],
            [0, 1024],
            r"nad_pairs.indices.1.*1024 is greater than the maximum of 1023",
        ),
        (["nad_pairs", "indices"], [0, 5, 5], r"nad_pairs.indices.*non-unique"),
        (["nad_pairs", "indices"], [], r"nad_pairs.indices.*should be non-empty"),
        (["nad_pairs", "seeds"], [0, 0], r"nad_pairs.seeds.*non-unique"),
        (["nad_pairs", "seeds"], [0.5], r"nad_pairs.seeds.0.*not of type 'integer'"),
        (["nad_pairs", "eps1"], 0, r"nad_pairs.eps1.*less than or equal to the minimum of 0"),
        (["nad_pairs", "sigma"], -1.0, r"nad_pairs.sigma"),
        (["nad_pairs", "architectures"], [], r"nad_pairs.architectures.*should be non-empty"),
        (["nad_pairs", "train", "epochs"], 0, r"nad_pairs.train.epochs"),
        (["nads", "estimator"], "exact", r"nads.estimator.*'exact' is not one of"),
        (["analysis", "transitions", "n_points"], 2, r"analysis.transitions.n_points.*minimum"),
        (["analysis", "cross_section", "range"], 0, r"analysis.cross_section.range"),
        (
            ["nad_pairs", "epsilon1"],
            1.0,
            r"unknown key 'nad_pairs.epsilon1' \(did you mean 'eps1'\?\)",
        ),
        (
            ["nad_pairs", "train_per_arch"],
            {"lenett": {"epochs": 3}},
            r"nad_pairs.train_per_arch.*'lenett'.*did you mean 'lenet'",
        ),
        (["architectures", "lenet", "nads_from"], "mlp", None),  # valid: shown below
    ],
)
def test_bad_values_stop_with_the_key_named(path, value, message):
    cfg = with_change(path, value)
    if message is None:
        assert nc.nad_source(load(cfg), "lenet") == "mlp"
        return
    with pytest.raises(nc.ConfigError, match=message):
        load(cfg)


def test_nads_from_must_point_to_a_source_directly():
    cfg = with_change(["architectures", "lenet", "nads_from"], "mlp")
    cfg["architectures"]["mlp"]["nads_from"] = "resnet18"
    with pytest.raises(nc.ConfigError, match="architectures.lenet.nads_from"):
        load(cfg)


def test_user_models_are_checked_before_any_job(tmp_path, monkeypatch):
    (tmp_path / "user_nets.py").write_text(
        "from torch import nn\n"
        "def good(in_channels, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, num_classes))\n"
        "def bad(in_channels, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 1024, 5))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = default_config()
    cfg["architectures"]["mine"] = {"model": "user_nets:good"}
    cfg["nad_pairs"]["architectures"] = ["mine"]
    assert nc.model_spec(load(cfg), "mine") == {"model": "user_nets:good", "kwargs": {}}
    cfg["architectures"]["mine"] = {"model": "user_nets:bad"}
    with pytest.raises(nc.ConfigError, match=r"architectures.mine.model.*expected \(2, 1\)"):
        load(cfg)
    cfg["architectures"]["mine"] = {"model": "missing_pkg:net"}
    with pytest.raises(nc.ConfigError, match="architectures.mine.model.*cannot import"):
        load(cfg)
    cfg["architectures"]["mine"] = {"model": "mlp", "kwargs": {"depth": 3}}
    with pytest.raises(nc.ConfigError, match="architectures.mine.kwargs.*depth"):
        load(cfg)


def test_per_architecture_settings_merge_over_study_and_global_defaults():
    cfg = default_config()
    cfg["nad_pairs"]["train_per_arch"] = {"lenet": {"epochs": 3, "lr_max": 0.05}}
    cfg["architectures"]["lenet"]["nads"] = {"n_networks": 7}
    cfg = load(cfg)
    lenet, mlp = (
        nc.train_settings(cfg, "nad_pairs", "lenet"),
        nc.train_settings(cfg, "nad_pairs", "mlp"),
    )
    assert (lenet.epochs, lenet.lr_max, lenet.momentum) == (3, 0.05, 0.9)
    assert mlp.epochs == cfg["nad_pairs"]["train"]["epochs"]
    assert nc.nad_settings(cfg, "lenet").n_networks == 7
    assert nc.nad_settings(cfg, "mlp").n_networks == cfg["nads"]["n_networks"]


def test_cross_section_figure_shows_the_selected_pairs():
    cfg = load(with_change(["analysis", "cross_section", "pairs"], [[0, 1000], [10, 10]]))
    assert [(c.i, c.j, c.seed) for c in nc.section_cells(cfg, "lenet")] == [
        (0, 1000, 0),
        (10, 10, 0),
    ]
    every = load(default_config())
    assert len(nc.section_cells(every, "lenet")) == len(every["nad_pairs"]["indices"]) ** 2
    with pytest.raises(nc.ConfigError, match=r"analysis.cross_section.pairs.1.*\(10, 11\)"):
        load(with_change(["analysis", "cross_section", "pairs"], [[0, 0], [10, 11]]))


def test_nad_indices_past_the_covariance_rank_are_warned_about():
    cfg = with_change(["nads", "n_networks"], 300)
    cfg["nad_pairs"]["indices"] = [0, 10, 299, 1000]
    (warning,) = [w for w in nc.rank_warnings(load(cfg)) if "lenet" in w]
    assert "[299, 1000]" in warning and "rank (299)" in warning and "above 1001" in warning
    assert nc.rank_warnings(load(default_config())) == []  # the default estimate is full rank


def test_grid_cells_and_nad_architectures():
    cfg = with_change(["nad_pairs", "seeds"], [0, 1])
    cfg["architectures"]["mlp"]["nads_from"] = "lenet"
    cfg = load(cfg)
    cells = nc.pair_cells(cfg)
    n = len(cfg["nad_pairs"]["indices"])
    assert len(cells) == 2 * n * n * 2 and len(set(cells)) == len(cells)
    assert nc.Cell("mlp", 0, 1000, 1) in cells
    assert nc.nad_architectures(cfg) == ["lenet"]
