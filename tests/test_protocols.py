"""Protocols as one more axis of a study's grid, and published results as references: read,
compared per protocol in the summary, drawn in the figures, said by `nadpipe versus`; a changed
protocol reruns its cells only."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import SCHEMA
from helpers import nadpipe_here, planned, snakemake

from nadpipe import config as nc
from nadpipe import plots
from nadpipe.grid import Plan
from nadpipe.references import ReferenceError, agreement, read
from nadpipe.settings import Reference


def test_a_published_curve_and_map_are_read_in_the_studys_terms(tmp_path):
    # the NAD paper's docs/data/nads.csv layout: index, then accuracy columns in percent
    pd.DataFrame({"index": [0, 1, 2], "acc_ln": [100.0, 99.5, 90.0]}).to_csv(
        tmp_path / "nads.csv", index=False
    )
    curve = read(Reference(str(tmp_path / "nads.csv"), "acc_ln"), "single_direction", "k")
    assert curve.index.name == "nad_k" and curve.loc[2] == 90.0
    # dft_accuracies.csv: x, y from 0 with the zero frequency at 8; fractions become percent
    xs, ys = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    dft = pd.DataFrame({"x": xs.ravel(), "y": ys.ravel(), "acc": 0.5 + 0.01 * xs.ravel()})
    dft.to_csv(tmp_path / "dft.csv", index=False)
    grid = read(Reference(str(tmp_path / "dft.csv"), "acc", offset=-8), "fourier", "k")
    assert grid.loc[(-8, 3)] == pytest.approx(50.0) and grid.loc[(7, 0)] == pytest.approx(65.0)
    # ... whose cell x is the frequency 2 (x - 8): in cycles per image with scale 2
    grid = read(Reference(str(tmp_path / "dft.csv"), "acc", offset=-8, scale=2), "fourier", "k")
    assert grid.loc[(-16, 6)] == pytest.approx(50.0) and grid.loc[(14, 0)] == pytest.approx(65.0)
    assert set(grid.index.get_level_values(0)) == set(range(-16, 16, 2))
    # a headerless size x size map, in the study's layout
    np.savetxt(tmp_path / "map.csv", np.arange(4.0).reshape(2, 2) + 60, delimiter=",")
    m = read(Reference(str(tmp_path / "map.csv")), "fourier", "k", axis=[-1, 0])
    assert m.loc[(-1, 0)] == 61.0 and m.loc[(0, -1)] == 62.0
    with pytest.raises(ReferenceError, match=r"'k': .*map.csv is a 2 x 2 map; .* 3 x 3"):
        read(Reference(str(tmp_path / "map.csv")), "fourier", "k", axis=[-1, 0, 1])
    with pytest.raises(ReferenceError, match=r"'k': .*nads.csv has no column 'acc_rn' \(it has"):
        read(Reference(str(tmp_path / "nads.csv"), "acc_rn"), "single_direction", "k")


def test_agreement_in_points_and_correlation():
    ref = pd.Series([100.0, 90.0, 60.0, 50.0], index=pd.Index([0, 1, 2, 3], name="nad_k"))
    mine = pd.Series([98.0, 91.0, 55.0], index=pd.Index([0, 1, 2], name="nad_k"))
    a = agreement(mine, ref)
    assert a["cells"] == 3 and a["mean_abs_diff"] == pytest.approx(8 / 3)
    assert a["max_abs_diff"] == 5.0 and a["pearson"] == pytest.approx(
        np.corrcoef([98, 91, 55], [100, 90, 60])[0, 1]
    )
    assert math.isnan(agreement(mine.iloc[:2], ref)["pearson"])  # two cells: no correlation


def test_protocols_are_an_axis_of_the_grid_with_the_same_data_and_initialisation():
    cfg = nc.load_config(
        {
            "nad_pairs": {"enabled": False},
            "single_direction": {
                "enabled": True, "architectures": ["lenet"], "indices": [0, 5],
                "protocols": {"stated": {}, "long": {"train": {"epochs": 60}},
                              "wide": {"eps": 1.0}},
            },
        },
        SCHEMA,
    )[0]  # fmt: skip
    plan = Plan(cfg)
    cells = [c.variant for c in plan.cells("single_direction")]
    assert cells == ["k0@long", "k5@long", "k0@stated", "k5@stated", "k0@wide", "k5@wide"]
    stated = plan.train_job("single_direction", "lenet", "k0@stated", (0,))
    long = plan.train_job("single_direction", "lenet", "k0@long", (0,))
    wide = plan.train_job("single_direction", "lenet", "k0@wide", (0,))
    assert long.train.epochs == 60 and stated.train.epochs == 20  # the NAD code's protocol
    assert long.data == stated.data and long.stream == stated.stream  # the same draws
    assert dict(wide.data[0].settings)["eps"] == 1.0 and wide.stream == stated.stream
    with pytest.raises(nc.ConfigError) as e:
        bad = {"single_direction": {"enabled": True, "protocols": {"x": {"eps1": 1.0}}}}
        nc.load_config(bad, SCHEMA)
    assert str(e.value) == (
        "config key 'single_direction.protocols.x.eps1': the data of single_direction have no "
        "'eps1'; a protocol of single_direction sets: eps, n_test, n_train, sigma, train"
    )


CONFIG = {
    "nads": {"n_networks": 24},
    "nad_pairs": {"enabled": False},
    "single_direction": {
        "enabled": True,
        "architectures": ["lenet"],
        "indices": [0, 1000],
        "n_train": 400,
        "n_test": 200,
        "train": {"epochs": 2},
        "protocols": {"stated": {}, "wide": {"eps": 2.0}},
        "references": {"lenet": {"file": "nads.csv", "column": "acc_ln"}},
    },
    "fourier": {
        "enabled": True,
        "architectures": ["mlp"],
        "size": 2,
        "layout": "centered",
        "n_train": 400,
        "n_test": 200,
        "train": {"epochs": 2},
        "references": {"mlp": {"file": "map.csv", "column": None}},
    },
}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("protocols")
    (workdir / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    index = np.arange(1024)
    pd.DataFrame({"index": index, "acc_ln": 100 - 50 * index / 1023}).to_csv(
        workdir / "nads.csv", index=False
    )
    np.savetxt(workdir / "map.csv", [[80.0, 70.0], [60.0, 50.0]], delimiter=",")
    snakemake(workdir, "--cores", "2")
    return workdir


def test_each_row_carries_its_protocol_and_its_agreement_with_the_reference(study):
    df = pd.read_parquet(study / "results/single_direction/summary.parquet")
    assert set(df["protocol"]) == {"stated", "wide"} and set(df["variant"]) == {
        f"k{k}@{p}" for k in (0, 1000) for p in ("stated", "wide")
    }
    assert (df.loc[df.protocol == "wide", "eps"] == 2.0).all()
    assert (df.loc[df.protocol == "stated", "eps"] == 0.5).all()
    test = df[df.split == "test"]
    published = test.set_index("nad_k")["reference_accuracy"]
    # a fraction, as `accuracy` (b879b52: percent beside a fraction in one row)
    assert published.loc[1000].iloc[0] == pytest.approx((100 - 50 * 1000 / 1023) / 100)
    assert test["accuracy"].between(0, 1).all() and test["reference_accuracy"].between(0, 1).all()
    for _, rows in test.groupby("protocol"):
        mine = rows.groupby("nad_k")["accuracy"].mean() * 100
        ref = rows.groupby("nad_k")["reference_accuracy"].first() * 100  # differences: points
        stated = rows.iloc[0]
        assert stated["reference_mean_abs_diff"] == pytest.approx((mine - ref).abs().mean())
        assert stated["reference_max_abs_diff"] == pytest.approx((mine - ref).abs().max())
        assert stated["reference_cells"] == 2
    fig = plots.single_direction_figure(df, "lenet", str(study / "f.png"))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("stated (|Δ| mean") for t in labels) and "published" in labels
    assert any(t.startswith("wide (|Δ| mean") for t in labels)
    fourier = pd.read_parquet(study / "results/fourier/summary.parquet")
    ref = fourier[fourier.split == "test"].set_index(["freq_a", "freq_b"])["reference_accuracy"]
    assert ref.loc[(-1, 0)] == 0.70 and ref.loc[(0, -1)] == 0.60  # the map, in the layout
    fig = plots.fourier_figure(fourier, "mlp", str(study / "m.png"))
    assert [ax.get_title().split("\n")[0] for ax in fig.axes[:2]] == ["test accuracy", "published"]


def test_nadpipe_versus_says_what_the_summary_states(study):
    res = nadpipe_here("versus", "results/single_direction/summary.parquet", "nads.csv",
                       "--column-b", "acc_ln", cwd=study)  # fmt: skip
    df = pd.read_parquet(study / "results/single_direction/summary.parquet")
    for protocol in ("stated", "wide"):
        row = df[df.protocol == protocol].iloc[0]
        said = re.search(rf"^{protocol}: 2 cells, mean \|difference\| ([\d.]+) points", res.stdout,
                         re.M)  # fmt: skip
        assert float(said[1]) == pytest.approx(row["reference_mean_abs_diff"], abs=0.05)
    res = nadpipe_here("versus", "results/single_direction/summary.parquet", "nads.csv",
                       "--column-b", "acc_ln", "--json", cwd=study)  # fmt: skip
    out = json.loads(res.stdout)  # for scripts: the same numbers, unrounded; NaN as null
    assert out["study"] == "single_direction"
    for entry in out["results"]:
        row = df[df.protocol == entry["protocol"]].iloc[0]
        assert entry["cells"] == 2 and entry["pearson"] is None  # two cells: no correlation
        assert entry["mean_abs_diff"] == pytest.approx(row["reference_mean_abs_diff"])


def test_nadpipe_versus_reads_a_table_s_cells_as_frequencies_with_offset_and_scale(study):
    # a table in the layout of the NAD paper's dft_accuracies.csv: cells x, y = 0, 1
    table = pd.DataFrame({"x": [0, 0, 1, 1], "y": [0, 1, 0, 1], "acc": [90.0, 80.0, 70.0, 60.0]})
    table.to_csv(study / "dft.csv", index=False)
    df = pd.read_parquet(study / "results/fourier/summary.parquet")
    mine = df[df.split == "test"].set_index(["freq_a", "freq_b"])["accuracy"] * 100

    def versus(*flags):
        res = nadpipe_here("versus", "results/fourier/summary.parquet", "dft.csv",
                           "--column-b", "acc", "--json", *flags, cwd=study)  # fmt: skip
        return json.loads(res.stdout)["results"][0]

    # offset -1: the cells are the frequencies -1, 0 of the study's centred 2 x 2 grid
    shifted = versus("--offset=-1")
    published = pd.Series([90.0, 80.0, 70.0, 60.0], index=mine.index.sort_values())
    assert shifted["cells"] == 4
    assert shifted["mean_abs_diff"] == pytest.approx((mine - published).abs().mean())
    # scale 2 after the offset: -2 and 0 cycles, so only (0, 0), the table's x = y = 1, in common
    scaled = versus("--offset=-1", "--scale=2")
    assert scaled["cells"] == 1
    assert scaled["mean_abs_diff"] == pytest.approx(abs(mine.loc[(0, 0)] - 60.0))


def test_versus_refuses_what_it_would_take_silently_and_names_its_own_flags(study):
    summary = "results/single_direction/summary.parquet"
    # swapped: the results first (0a58d4e: read the CSV as results and asked for --study)
    res = nadpipe_here("versus", "nads.csv", summary, cwd=study, check=False)
    assert res.returncode == 2 and "the results come first, the reference second" in res.stderr
    # a reference of two protocols (0a58d4e: its first taken without a word)
    res = nadpipe_here("versus", summary, summary, cwd=study, check=False)
    assert res.returncode == 2 and "holds 2 protocols (stated, wide)" in res.stderr
    assert "say which with --protocol-b NAME" in res.stderr
    res = nadpipe_here("versus", summary, summary, "--protocol-b", "stated", "--json", cwd=study)
    stated = [r for r in json.loads(res.stdout)["results"] if r["protocol"] == "stated"]
    assert stated[0]["mean_abs_diff"] == 0
    # a column of the reference that is not there: the flag that names it (0a58d4e: --column)
    res = nadpipe_here("versus", summary, "nads.csv", "--column-b", "nope", cwd=study,
                       check=False)  # fmt: skip
    assert res.returncode == 2 and res.stderr.startswith("nadpipe versus: '--column-b': nads.csv")
    assert "name the columns it has (--column-b, --index, --a, --b)" in res.stderr


def test_a_changed_protocol_reruns_its_cells_only(study):
    change = {"single_direction": {"protocols": {"stated": {}, "wide": {"eps": 1.5}}}}
    jobs = planned(study, change)
    assert jobs["train"] == jobs["evaluate"] == 2  # wide's two cells, not stated's
    # a replaced reference file reruns the comparison, not a training
    pd.DataFrame({"index": range(1024), "acc_ln": 50.0}).to_csv(study / "nads.csv", index=False)
    jobs = planned(study)
    assert "train" not in jobs and jobs["aggregate"] == 1


FAULTS = {  # name -> (the CSV's rows, the Reference's settings, what the message says)
    "text": ({"index": [0, 1000], "acc": [90, "n/a"]}, {},
             r"nads.csv, line 3, column 'acc' holds 'n/a', not a number"),
    "empty index": ({"index": [0, None], "acc": [90, 80]}, {},
                    r"nads.csv, line 3, column 'index' is empty"),
    "repeated": ({"index": [0, 1000, 0], "acc": [90, 80, 85]}, {},
                 r"nads.csv, lines 2 and 4: the index 0 appears twice \(column 'index'\)"),
    "fractional": ({"index": [0, 999.5], "acc": [90, 80]}, {},
                   r"nads.csv, line 3, column 'index': 999.5 is not a whole number"),
    "over 100": ({"index": [0, 1000], "acc": [90, 150]}, {},
                 r"nads.csv, line 3, column 'acc' holds 150: accuracies are numbers within"),
    "negative": ({"index": [0, 1000], "acc": [-1, 80]}, {},
                 r"nads.csv, line 2, column 'acc' holds -1: accuracies are numbers within"),
    "eigenvalues": ({"index": [0, 1000], "acc": [0.14, 0.001]}, {},
                    r"nads.csv, column 'acc': no value reaches chance \(50 %.*largest is 14 %\)"),
    "no rows": ({"index": [], "acc": []}, {}, r"nads.csv has no rows"),
    "fractions among percents": ({"index": [0, 1000], "acc": [62, 0.55]}, {},
                                 r"nads.csv, line 3, column 'acc' holds 0.55 while others are "
                                 r"percents \(up to 62\): the column mixes fractions and percents"),
    "no header line": ({"0": [1000], "90": [80]}, {},
                       r"nads.csv has no header line: its first line holds numbers \(0, 90\)"),
    "no such column": ({"index": [0, 1000], "accuracy": [90, 80]}, {},
                       r"nads.csv has no column 'acc' \(it has: index, accuracy\); name the"),
    "no common cell": ({"index": [3, 4], "acc": [90, 80]}, {},
                       r"nads.csv: no cell in common with .*\(it has 0, 1000; the reference 3, 4"),
    "offset": ({"index": [0, 1000], "acc": [90, 80]}, {"offset": -8},
               r"'offset' does not apply to a single_direction reference"),
    "scale": ({"index": [0, 1000], "acc": [90, 80]}, {"scale": 2},
              r"'scale' does not apply to a single_direction reference"),
}  # fmt: skip


@pytest.mark.parametrize("fault", FAULTS)
def test_a_faulty_reference_is_refused_before_any_job_and_by_versus_in_the_same_words(
    fault, study, tmp_path, monkeypatch
):
    # b879b52: a raw pandas error or traceback (text, empty cell, repeats; one after every
    # training), or a wrong comparison (150 %, eigenvalues, fractional indices truncated, NaN
    # agreement without a common cell, offset ignored)
    rows, settings, says = FAULTS[fault]
    monkeypatch.chdir(tmp_path)
    pd.DataFrame(rows).to_csv("nads.csv", index=False)
    cfg = {"single_direction": {**CONFIG["single_direction"], "protocols": {},
           "references": {"lenet": {"file": "nads.csv", "column": "acc", **settings}}}}  # fmt: skip
    with pytest.raises(nc.ConfigError, match="^config key 'single_direction.references.lenet': "
                       + says):  # fmt: skip
        nc.load_config({"nad_pairs": {"enabled": False}, **cfg}, SCHEMA)
    flags = [f"--{k}={v}" for k, v in settings.items()]
    summary = study / "results/single_direction/summary.parquet"
    res = nadpipe_here("versus", str(summary), "nads.csv", "--column-b", "acc", *flags,
                       check=False)  # fmt: skip
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert re.search(says, res.stderr) and "Traceback" not in res.stderr, res.stderr
