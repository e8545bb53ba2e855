"""The config: schema errors name the key, defaults come from nadpipe.settings, and a config that
cannot mean anything stops before any job."""

import copy
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, SCHEMA
from helpers import snakemake_here

from nadpipe import config as nc
from nadpipe.grid import Plan
from nadpipe.settings import Shape


def default_config():
    return yaml.safe_load((REPO / "config.yaml").read_text())


def load(cfg):
    return nc.load_config(cfg, SCHEMA)[0]


def with_change(path, value, cfg=None):
    cfg = copy.deepcopy(cfg) if cfg is not None else default_config()
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return cfg


def test_default_and_paper_configs_are_valid():
    cfg = load(default_config())
    assert cfg.studies["nad_pairs"].train.grad_clip == 0.5
    paper = load(yaml.safe_load((REPO / "configs" / "paper_sec3.yaml").read_text()))
    pairs = paper.studies["nad_pairs"]
    assert pairs.architectures == ("mlp", "lenet", "resnet18")
    assert pairs.train_for("resnet18").epochs == 30 and pairs.train_for("lenet").epochs == 50
    assert len(Plan(paper).cells("nad_pairs")) == 3 * len(pairs.indices) ** 2 * 3


def test_defaults_are_filled_from_the_settings_classes():
    cfg = load({"nad_pairs": {"architectures": ["lenet"]}})
    assert cfg.nads.estimator == "dipole" and cfg.nads.step == 100.0
    assert cfg.nads.n_networks == 10000  # the papers' value; config.yaml makes it CPU-sized
    s = cfg.studies["nad_pairs"]
    assert (s.eps1, s.eps2, s.n_train, s.train.batch_size) == (1.0, 0.5, 10000, 128)
    assert cfg.analysis.cross_section.resolution == 41 and cfg.analysis.cross_section.pairs is None
    assert cfg.analysis.transitions.n_points == 256 and cfg.analysis.margin_steps == 200
    assert cfg.arch("lenet").model == "lenet" and cfg.arch("lenet").shape == Shape(1, 32, 32)
    # a study's own training defaults, and an override of one key keeping the others
    cifar = load({"cifar_nad": {"train": {"epochs": 3}}}).studies["cifar_nad"].train
    assert (cifar.epochs, cifar.lr_max, cifar.weight_decay, cifar.grad_clip) == (
        3,
        0.15,
        1e-5,
        None,
    )


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
            r"nad_pairs.architectures.1.*unknown architecture 'resnet'.*did you mean 'resnet18'",
        ),
        (
            ["nad_pairs", "indices"],
            [0, 1024],
            r"nad_pairs.indices.1.*1024 is greater than the maximum of 1023",
        ),
        (["nad_pairs", "indices"], [0, 5, 5], r"nad_pairs.indices.*non-unique"),
        (["nad_pairs", "indices"], [], r"nad_pairs.indices.*should be non-empty"),
        (["nad_pairs", "seeds"], [0, 0], r"nad_pairs.seeds.*non-unique"),
        (["nad_pairs", "seeds"], [0.5], r"nad_pairs.seeds.0.*0.5 is not of type 'integer'"),
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
        (["nads", "n_network"], 5, r"unknown key 'nads.n_network' \(did you mean 'n_networks'\?\)"),
        (
            ["nad_pairs", "train_per_arch"],
            {"lenett": {"epochs": 3}},
            r"nad_pairs.train_per_arch.lenett.*'lenett'.*did you mean 'lenet'",
        ),
        # a config that cannot mean anything (issue 13)
        (["nad_pairs", "eps1"], float("nan"), r"'nad_pairs.eps1': .nan is not a finite number"),
        (["nad_pairs", "sigma"], float("inf"), r"'nad_pairs.sigma': .inf is not a finite number"),
        (
            ["analysis", "margin_max"],
            float("-inf"),
            r"'analysis.margin_max': -.inf is not a finite",
        ),
        (
            ["nad_pairs", "train", "grad_clip"],
            float("nan"),
            r"'nad_pairs.train.grad_clip': .nan is not a finite",
        ),
        (["cifar10", "mean"], [0.5, float("nan"), 0.5], r"'cifar10.mean.1': .nan is not a finite"),
        (
            ["nad_pairs", "train", "epochs"],
            10.0,
            r"'nad_pairs.train.epochs': 10.0 is not an integer: write 10",
        ),
        (
            ["nad_pairs", "indices"],
            [0, 10.0],
            r"'nad_pairs.indices.1': 10.0 is not an integer: write 10",
        ),
        (["nad_pairs", "seeds"], [0.0], r"'nad_pairs.seeds.0': 0.0 is not an integer: write 0"),
        (["nads", "n_networks"], 64.0, r"'nads.n_networks': 64.0 is not an integer: write 64"),
        (["nads", "top_k"], 8.0, r"'nads.top_k': 8.0 is not an integer: write 8"),
        (
            ["nad_pairs", "train", "weight_decay"],
            "1e-5",
            r"'1e-5' is text, not a number.*write 1e-05",
        ),
        (["nads", "n_networks"], 2, r"nads.n_networks.*2 is less than the minimum of 22"),
        (
            ["nad_pairs", "architectures"],
            ["a/b"],
            r"'nad_pairs.architectures.0': 'a/b' is not a valid architecture name",
        ),
        (
            ["nad_pairs", "architectures"],
            [".."],
            r"'nad_pairs.architectures.0': '..' is not a valid architecture name",
        ),
        (["nad_pairs", "architectures"], ["my net"], r"'my net' is not a valid architecture name"),
        (
            ["nad_pairs", "architectures"],
            ["x" * 300],
            r"is not a valid architecture name: use letters, digits",
        ),
        (
            ["architectures", "a/b"],
            {"model": "mlp"},
            r"'architectures.a/b': 'a/b' is not a valid architecture name",
        ),
    ],
)
def test_bad_values_stop_with_the_key_named(path, value, message):
    with pytest.raises(nc.ConfigError, match=message):
        load(with_change(path, value))


def test_nads_from_and_settings_it_would_ignore():
    cfg = with_change(["architectures", "lenet", "nads_from"], "mlp")
    assert load(cfg).nad_source("lenet") == "mlp"
    chain = with_change(["architectures", "mlp", "nads_from"], "resnet18", cfg)
    with pytest.raises(nc.ConfigError, match="architectures.lenet.nads_from.*point to the source"):
        load(chain)
    ignored = with_change(["architectures", "lenet", "nads"], {"n_networks": 64}, cfg)
    with pytest.raises(
        nc.ConfigError,
        match=r"'architectures.lenet.nads': lenet takes its NADs "
        r"from 'mlp' \(nads_from\), so this setting would be ignored",
    ):
        load(ignored)


def test_settings_that_have_no_effect_are_warned_about():
    cfg = with_change(["nad_pairs", "train_per_arch"], {"resnet18": {"epochs": 3}})
    cfg["nads"]["estimator"] = "gradient"
    cfg["nads"]["step"] = 10.0
    _, warnings = nc.load_config(cfg, SCHEMA)
    text = "\n".join(warnings)
    assert "'nad_pairs.train_per_arch.resnet18' has no effect: resnet18 is not in nad_pairs" in text
    assert "'nads.step' has no effect on lenet: its estimator is 'gradient'" in text


USER_NETS = (REPO / "docs" / "user_nets.py").read_text()  # the catalogue runs them too


@pytest.mark.parametrize(
    ("model", "kwargs", "message"),
    [
        (
            "user_nets:bad_shape",
            {},
            r"'architectures.mine.model': model 'user_nets:bad_shape' maps "
            r"\(4, 2, 32, 32\) to \(4, 5\) in eval mode, expected \(4, 2\)",
        ),
        (
            "user_nets:tuple_out",
            {},
            r"'architectures.mine.model': .* returned a tuple in eval mode",
        ),
        (
            "user_nets:rgb_only",
            {},
            r"'architectures.mine.model': model 'user_nets:rgb_only' raised "
            r"RuntimeError inside forward .* needs? other input channels than 2",
        ),
        (
            "user_nets:raises_in_forward",
            {},
            r"'architectures.mine.model': .* raised TypeError "
            r"inside forward \(eval mode\) .*: boom in forward",
        ),
        (
            "user_nets:not_a_module",
            {},
            r"'architectures.mine.model': .* returned a str, not a "
            r"torch.nn.Module",
        ),
        (
            "user_nets:tuple_in_training",
            {},
            r"'architectures.mine.model': .* returned a tuple in "
            r"train mode",
        ),
        (
            "user_nets:one_logit",
            {},
            r"'architectures.mine.model': model 'user_nets:one_logit' takes no arguments, so it "
            r"makes one network .* for training \(2 outputs\) nadpipe calls it as "
            r"one_logit\(in_channels, num_classes, \*\*kwargs\)",
        ),
        (
            "user_nets:frozen",
            {},
            r"'architectures.mine.model': .* no parameter that receives a gradient",
        ),
        (
            "missing_pkg:net",
            {},
            r"'architectures.mine.model': user model 'missing_pkg:net': cannot "
            r"import module 'missing_pkg'",
        ),
        (
            "mlp",
            {"depth": 3},
            r"'architectures.mine.kwargs.depth': .*unexpected keyword argument 'depth'",
        ),
        (  # at 820f241: passed the check, and failed the first job under a traceback
            "user_nets:not_finite",
            {},
            r"'architectures.mine.model': model 'user_nets:not_finite' returns values that are "
            r"not finite \(NaN or inf\) in eval mode",
        ),
        (  # at 820f241: named 'architectures.mine.model'
            "user_nets:widths",
            {"width": 0, "depth": 2},
            r"'architectures.mine.kwargs.width': model 'user_nets:widths': the builder raised "
            r"ValueError: width must be positive, got 0; it works without its kwargs \(width=0\)",
        ),
    ],
)
def test_user_models_are_checked_before_any_job(tmp_path, monkeypatch, model, kwargs, message):
    (tmp_path / "user_nets.py").write_text(USER_NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = with_change(["architectures", "mine"], {"model": model, "kwargs": kwargs})
    cfg["nad_pairs"]["architectures"] = ["mine"]
    with pytest.raises(nc.ConfigError, match=message):
        load(cfg)


def test_a_good_user_model_loads(tmp_path, monkeypatch):
    (tmp_path / "user_nets.py").write_text(USER_NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = with_change(["architectures", "mine"], {"model": "user_nets:good"})
    cfg["nad_pairs"]["architectures"] = ["mine"]
    loaded = load(cfg)
    assert Plan(loaded).model_spec("nad_pairs", "mine").model == "user_nets:good"


def test_a_registry_model_that_passed_is_not_built_again_and_a_failure_always_is(
    tmp_path, monkeypatch
):
    from nadpipe import models, verdicts

    monkeypatch.setenv(verdicts.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(verdicts, "_found", {})  # not the probes of the tests before, here
    (tmp_path / "user_nets.py").write_text(USER_NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    built = []  # the real check, counted
    real = models.check_model
    monkeypatch.setattr(models, "check_model", lambda spec: built.append(spec) or real(spec))

    def config(model, kwargs):
        cfg = with_change(["architectures", "mine"], {"model": model, "kwargs": kwargs})
        cfg["nad_pairs"]["architectures"] = ["mine"]
        return cfg

    load(config("mlp", {"hidden": [32]}))
    n = len(built)
    assert n and {s.model for s in built} == {"mlp"}
    # a command that runs no job remembers nothing: the next one checks again
    load(config("mlp", {"hidden": [32]}))
    assert len(built) == 2 * n and not verdicts.folder().exists()
    verdicts.remember()  # a run that executes jobs (its onstart)
    assert len(list(verdicts.folder().iterdir())) == n
    load(config("mlp", {"hidden": [32]}))
    assert len(built) == 2 * n  # not built again
    load(config("mlp", {"hidden": [33]}))  # another spec: checked
    assert len(built) == 3 * n
    for _ in range(2):  # a failure is never remembered
        with pytest.raises(nc.ConfigError, match="architectures.mine.kwargs.depth"):
            load(config("mlp", {"depth": 3}))
        verdicts.remember()
    count = len(built)
    for _ in range(2):  # a user's model: its code is not the library's, so checked every time
        load(config("user_nets:good", {}))
        verdicts.remember()
    assert len(built) == count + 2 * n


def test_per_architecture_settings_merge_over_study_and_global_defaults():
    cfg = default_config()
    cfg["nad_pairs"]["train_per_arch"] = {"lenet": {"epochs": 3, "lr_max": 0.05}}
    cfg["architectures"]["lenet"] = {"nads": {"n_networks": 70}}
    cfg = load(cfg)
    s = cfg.studies["nad_pairs"]
    lenet, mlp = s.train_for("lenet"), s.train_for("mlp")
    assert (lenet.epochs, lenet.lr_max, lenet.momentum) == (3, 0.05, 0.9)
    assert mlp.epochs == s.train.epochs
    assert cfg.nad_config("lenet").n_networks == 70
    assert cfg.nad_config("mlp").n_networks == cfg.nads.n_networks


def test_cross_section_figure_shows_the_selected_pairs():
    cfg = load(with_change(["analysis", "cross_section", "pairs"], [[0, 1000], [100, 100]]))
    cells = Plan(cfg).section_cells("nad_pairs", "lenet")
    assert [(c.variant, c.seed) for c in cells] == [("i0_j1000", 0), ("i100_j100", 0)]
    every = load(default_config())
    assert (
        len(Plan(every).section_cells("nad_pairs", "lenet"))
        == len(every.studies["nad_pairs"].indices) ** 2
    )
    with pytest.raises(nc.ConfigError, match=r"analysis.cross_section.pairs.1.*\(10, 11\)"):
        load(with_change(["analysis", "cross_section", "pairs"], [[0, 0], [10, 11]]))


def test_nad_indices_past_the_covariance_rank_are_warned_about():
    cfg = with_change(["nads", "n_networks"], 300)
    cfg["nad_pairs"]["indices"] = [0, 10, 299, 1000]
    _, warnings = nc.load_config(cfg, SCHEMA)
    (warning,) = [w for w in warnings if "lenet" in w]
    assert "[299, 1000]" in warning and "rank (299)" in warning and "above 1001" in warning
    assert nc.load_config(default_config(), SCHEMA)[1] == []  # the default estimate is full rank


def test_grid_cells_and_nad_architectures():
    cfg = with_change(["nad_pairs", "seeds"], [0, 1])
    cfg["architectures"]["mlp"] = {"nads_from": "lenet"}
    plan = Plan(load(cfg))
    cells = plan.cells("nad_pairs")
    n = len(plan.cfg.studies["nad_pairs"].indices)
    assert len(cells) == 2 * n * n * 2 and len(set(cells)) == len(cells)
    assert ("mlp", "i0_j1000", 1) in {(c.arch, c.variant, c.seed) for c in cells}
    assert plan.nad_architectures() == ["lenet"]


@pytest.mark.filterwarnings("error::UserWarning")  # (0.5.0: torch warned of a zero-size layer)
def test_other_input_shapes_reach_the_studies():
    cfg = with_change(["architectures", "lenet"], {"shape": [3, 32, 32]})
    cfg["nad_pairs"]["architectures"] = ["lenet"]
    plan = Plan(load(cfg))
    assert plan.model_spec("nad_pairs", "lenet").shape == Shape(6, 32, 32)  # two blocks of RGB
    assert plan.nad_job("lenet").model.shape == Shape(3, 32, 32)
    assert plan.nad_job("lenet").model.classes == 1
    # NAD indices run to the last coordinate of the shape: 3 x 32 x 32 = 3072
    load(with_change(["nad_pairs", "indices"], [0, 3071], cfg))
    with pytest.raises(
        nc.ConfigError, match=r"nad_pairs.indices.1.*3072 is greater than the maximum of 3071"
    ):
        load(with_change(["nad_pairs", "indices"], [0, 3072], cfg))
    big = with_change(["architectures", "lenet"], {"shape": [3, 64, 64]}, cfg)
    with pytest.raises(nc.ConfigError, match=r"12288 coordinates.*top_k"):
        load(big)
    with pytest.raises(nc.ConfigError, match=r"'architectures.vgg11.model'.*raised RuntimeError"):
        load(
            with_change(
                ["architectures", "vgg11"],
                {"shape": [1, 28, 28]},
                with_change(["nad_pairs", "architectures"], ["vgg11"]),
            )
        )


def test_doing_what_the_rank_warning_says_removes_it():
    cfg = with_change(["nads", "n_networks"], 300)
    cfg["nad_pairs"]["indices"] = [0, 10, 299, 1000]
    (warning,) = [w for w in nc.load_config(cfg, SCHEMA)[1] if "lenet" in w]
    above = int(re.search(r"Raise nads.n_networks above (\d+)", warning)[1])
    cfg["nads"]["n_networks"] = above + 1  # exactly what it says
    assert nc.load_config(cfg, SCHEMA)[1] == []


def test_nad_bands_lie_within_the_nads_of_every_architecture():
    cfg = with_change(["analysis", "nad_bands"], {"enabled": True, "bands": [[0, 9], [10, 1023]]})
    assert load(cfg).analysis.nad_bands.bands == ((0, 9), (10, 1023))
    with pytest.raises(nc.ConfigError, match=r"'analysis.nad_bands.bands.1': \[10, 1024\] ends "
                       r"past the last NAD of lenet \(1023: 1024 NADs"):  # fmt: skip
        load(with_change(["analysis", "nad_bands", "bands"], [[0, 9], [10, 1024]], cfg))
    with pytest.raises(nc.ConfigError, match=r"'analysis.nad_bands.bands.0': \[9, 0\] is empty"):
        load(with_change(["analysis", "nad_bands", "bands"], [[9, 0]], cfg))
    few = with_change(["architectures", "lenet"], {"nads": {"top_k": 64}}, cfg)
    few["nad_pairs"]["indices"] = [0, 10]
    with pytest.raises(nc.ConfigError, match=r"bands.1.*past the last NAD of lenet \(63: 64 NADs"):
        load(few)
    # nothing evaluates the bands while they are disabled
    load(with_change(["analysis", "nad_bands", "enabled"], False, few))


def test_an_invalid_value_is_not_also_reported_as_an_unknown_key():
    with pytest.raises(nc.ConfigError) as err:
        load(with_change(["nad_pairs", "train", "epochs"], 10.0))
    assert str(err.value) == (
        "invalid config:\n  config key 'nad_pairs.train.epochs': 10.0 is not an integer: write 10"
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [  # keys that accept one of two kinds of values (at 820f241: "... is not valid under any
        # of the given schemas")
        (["gpus", "slots"], -1, "'gpus.slots': -1 is not valid here; use null or an integer >= 1"),
        # 0 slots: no pool, so GPU jobs would run unbounded on every GPU (b879b52 accepted it)
        (["gpus", "slots"], 0, "'gpus.slots': 0 is not valid here; use null or an integer >= 1"),
        (["nads", "top_k"], 0, "'nads.top_k': 0 is not valid here; use null or an integer >= 1"),
        (
            ["nad_pairs", "train", "grad_clip"],
            -1,
            "'nad_pairs.train.grad_clip': -1 is not valid here; use null or a number > 0",
        ),
        (
            ["analysis", "cross_section", "pairs"],
            [[1]],
            "use null or a list of lists of 2 integers >= 0",
        ),
    ],
)
def test_a_key_of_two_kinds_says_what_would_be_valid(path, value, message):
    with pytest.raises(nc.ConfigError) as e:
        load(with_change(path, value))
    assert message in str(e.value) and "any of the given schemas" not in str(e.value)


def test_a_fourier_grid_larger_than_the_image_is_refused():
    cfg = with_change(["fourier"], {"enabled": True, "architectures": ["lenet"], "size": 33})
    with pytest.raises(nc.ConfigError) as e:  # at 820f241: f32_0 trained, the direction of f0_0
        load(cfg)
    assert str(e.value) == (
        "config key 'fourier.size': 33 is greater than the maximum of 32 (lenet's inputs are "
        "1x32x32: a frequency past 31 is a lower one again, e.g. f32_0 is the direction of f0_0)"
    )
    cfg["fourier"]["size"] = 32  # the largest it says
    assert len(Plan(load(cfg)).cells("fourier")) == 32 * 32
    # a step of 2 cycles per image: 16 x 2 spans the whole band of 32 pixels, 16 x 4 past it
    cfg["fourier"].update({"size": 16, "step": 4, "layout": "centered"})
    with pytest.raises(nc.ConfigError) as e:
        load(cfg)
    assert str(e.value) == (
        "config key 'fourier.step': 4 is greater than the maximum of 2 for fourier.size 16 "
        "(lenet's inputs are 1x32x32: size x step = 64 frequencies along an axis, past 32 they "
        "are lower ones again; or a size of at most 8 for this step)"
    )
    cfg["fourier"]["step"] = 2  # the largest it says
    plan = Plan(load(cfg))
    assert {c.variant for c in plan.cells("fourier")} == {
        f"f{a}_{b}" for a in range(-16, 16, 2) for b in range(-16, 16, 2)
    }
    cfg["fourier"].update({"size": 8, "step": 4})  # or the size it says for the step
    assert {c.variant for c in Plan(load(cfg)).cells("fourier")} == {
        f"f{a}_{b}" for a in range(-16, 16, 4) for b in range(-16, 16, 4)
    }


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    (tmp_path / "config.yaml").write_text("nad_pairs:\n  indices: [0, 10\n  seeds: [0]\n")
    with pytest.raises(nc.ConfigError) as e:
        nc.check_yaml(tmp_path / "config.yaml")
    assert str(e.value).startswith(f"{tmp_path / 'config.yaml'}, line 3, column 8: not valid YAML")
    assert "flow sequence that starts at line 2, column 12" in str(e.value)


def _published_stand_ins(folder: Path, bases: bool = True) -> None:
    """Stand-ins of the NAD authors' published files, in their layout and shape (`bases`: the
    NADs too, 1023 x 1024 as published: one NAD fewer than the 32 x 32 inputs)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    q = np.linalg.qr(rng.standard_normal((1024, 1024)))[0].T[:1023] if bases else 0
    for arch in ("LeNet", "ResNet18", "DenseNet121", "VGG11") if bases else ():
        np.save(folder / f"{arch}_NADs.npy", q.astype(np.float32))
    columns = {c: 50.0 for c in ("acc_ln", "acc_rn", "acc_dn", "acc_vgg")}
    pd.DataFrame({"index": range(1024), **columns}).to_csv(folder / "nads.csv", index=False)
    xs, ys = np.meshgrid(range(16), range(16), indexing="ij")
    pd.DataFrame({"x": xs.ravel(), "y": ys.ravel(), **columns}).to_csv(
        folder / "dft_accuracies.csv", index=False
    )


def test_the_lenet_fourier_map_config_is_the_map_under_the_searched_sigma(tmp_path, monkeypatch):
    from snakemake.utils import update_config

    cfg = default_config()
    for name in ("nad_paper", "nad_paper_lenet_fourier"):
        update_config(cfg, yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text()))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nc.ConfigError, match=r"no file 'data/nad_paper/dft_accuracies.csv'"):
        load(copy.deepcopy(cfg))
    _published_stand_ins(tmp_path / "data" / "nad_paper", bases=False)  # the map needs no NADs
    loaded = load(cfg)
    plan = Plan(loaded)
    assert not loaded.studies["single_direction"].enabled and plan.nad_architectures() == []
    cells = plan.cells("fourier")
    assert len(cells) == 256 and {c.arch for c in cells} == {"lenet"}  # the 16 x 16 map
    data = dict(plan.data_spec("fourier", "lenet", cells[0].variant, 0).settings)
    assert data["sigma"] == 0.5 and data["eps"] == 0.5 and data["n_train"] == 10000
    job = plan.train_job("fourier", "lenet", cells[0].variant, (0,))
    assert (job.train.epochs, job.train.lr_max, job.train.momentum) == (20, 0.5, 0.0)


def test_the_nad_paper_search_config_is_valid_with_the_published_files_in_place(
    tmp_path, monkeypatch
):
    from snakemake.utils import update_config

    cfg = default_config()
    for name in ("nad_paper", "nad_paper_search"):
        update_config(cfg, yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text()))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nc.ConfigError, match=r"no file 'data/nad_paper/"):
        load(copy.deepcopy(cfg))  # stops before any job: the published data are not shipped
    _published_stand_ins(tmp_path / "data" / "nad_paper")
    plan = Plan(load(cfg))
    cells = plan.cells("single_direction")
    assert len(cells) == 8 * 14 * 9  # architectures x indices x protocols
    assert max(c.variant for c in cells if c.variant.startswith("k1022")) == "k1022@stated"
    assert len(plan.cells("fourier")) == 4 * 256 * 6
    assert plan.train_job("single_direction", "lenet_pub", "k5@long", (0,)).train.epochs == 60
    assert (
        dict(plan.data_spec("single_direction", "lenet_pub", "k5@sigma_0p5", 0).settings)["sigma"]
        == 0.5
    )


def test_the_newer_keys_say_their_real_choices_and_conflicts():
    # 10c1e0f: grouped: yes got "use text or true or false" (the only text is auto); grouped
    # with the gradient estimator and precision fp32 beside bf16 true passed without a word
    with pytest.raises(nc.ConfigError, match=r"'nads.grouped': 'yes' is not valid here; use "
                       r"auto or true or false$"):  # fmt: skip
        load(with_change(["nads", "grouped"], "yes"))
    cfg = with_change(["nads"], {"estimator": "gradient", "grouped": True})
    warnings = nc.load_config(cfg, SCHEMA)[1]
    assert "config key 'nads.grouped' has no effect on mlp: its estimator is 'gradient' (the key " \
           "is the dipole's)" in warnings  # fmt: skip
    train = {"epochs": 1, "precision": "fp32", "bf16": True}
    with pytest.raises(nc.ConfigError, match=r"'nad_pairs.train.precision': fp32 for \w+, while "
                       r"bf16 is true there"):  # fmt: skip
        load(with_change(["nad_pairs", "train"], train))
    load(with_change(["nad_pairs", "train"], {**train, "precision": "bf16"}))  # they agree


def test_a_nad_index_the_published_basis_lacks_is_refused_naming_the_file(tmp_path, monkeypatch):
    from snakemake.utils import update_config

    cfg = default_config()
    for name in ("nad_paper", "nad_paper_search"):
        update_config(cfg, yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text()))
    cfg["single_direction"]["indices"] = [0, 1023]
    monkeypatch.chdir(tmp_path)
    _published_stand_ins(tmp_path / "data" / "nad_paper")
    with pytest.raises(nc.ConfigError) as e:
        load(cfg)
    assert str(e.value) == (
        "config key 'single_direction.indices.1': 1023 is greater than the maximum of 1022 (the "
        "last NAD of lenet_pub: 1023 NADs, the rows of data/nad_paper/LeNet_NADs.npy)"
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [  # b879b52: huge integers reached an allocation or Snakemake's wildcards
        (["nad_pairs", "n_train"], 10**12, "'nad_pairs.n_train': 1000000000000 is greater than "
         "the maximum of 10000000"),
        (["nad_pairs", "seeds"], [0, 10**30], "'nad_pairs.seeds.1': 1000000000000000000000000000000"
         " is greater than the maximum of 2147483647"),
        (["nads", "n_networks"], 10**12, "nads.n_networks): 1000000000000 networks x 1 point(s) "
         "x 1024 coordinates need 7629395 GiB of sensitivities (float64), over the 1024 GiB "
         "nadpipe allows"),
    ],
)  # fmt: skip
def test_huge_integers_are_refused_naming_the_key(path, value, message):
    with pytest.raises(nc.ConfigError) as e:
        load(with_change(path, value))
    assert message in str(e.value)


def test_command_line_overrides_are_typed_and_checked_as_in_a_file(tmp_path):
    # b879b52: --config 'nads={n_networks: 50}' failed with "'50' is not of type 'integer'"
    # (Snakemake reads nested --config values with YAML's base loader: every scalar a string)
    assert nc.with_overrides(
        {"nads": {"n_networks": 1100, "step": 100.0}, "gpus": {"device": "auto"}},
        {"nads": {"n_networks": "50", "windowed": "false"}, "gpus": {"device": "cpu"}},
    ) == {"nads": {"n_networks": 50, "step": 100.0, "windowed": False}, "gpus": {"device": "cpu"}}
    assert nc.with_overrides({}, {"nad_pairs": {"seeds": ["0", "1"], "lr": "1e-5"}}) == {
        "nad_pairs": {"seeds": [0, 1], "lr": "1e-5"}  # YAML's own reading: a text, refused later
    }
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")

    def dry(*values):
        return snakemake_here(tmp_path, "-n", "--config", *values, check=False)

    res = dry("nads={n_networks: 50}", "nad_pairs={seeds: [0, 1]}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert re.search(r"^train\s+36$", res.stdout, re.M)  # 9 cells x 2 seeds x 2 archs
    res = dry("nads={n_networks: 5}")  # validated like the file, in its words
    assert res.returncode != 0
    assert (
        "config key 'nads.n_networks': 5 is less than the minimum of 22" in res.stdout + res.stderr
    )


def test_the_schema_read_by_libyaml_is_the_schema_pyyamls_own_loader_reads(monkeypatch):
    # load_schema reads it with libyaml's loader where PyYAML has it (every Snakemake process
    # reads the schema), else with the pure-Python one: the same schema either way
    assert hasattr(yaml, "CSafeLoader")  # PyYAML's wheels have libyaml
    fast = nc.load_schema(SCHEMA)
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert nc.load_schema(SCHEMA) == fast
