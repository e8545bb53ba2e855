"""The real Snakemake DAG end to end on a micro config, and what a config change re-plans."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO

MICRO = {
    "architectures": {
        "mlp": {"model": "mlp", "kwargs": {"hidden": [64]}},
        "lenet": {"model": "lenet"},
    },
    "nads": {"n_networks": 48},
    "nad_pairs": {
        "architectures": ["mlp", "lenet"],
        "indices": [0, 1000],
        "seeds": [0],
        "eps2": 1.0,  # both channels equally easy to separate: which one is used is the bias
        "n_train": 2000,
        "n_test": 1000,
        "train": {"epochs": 10},
    },
    "analysis": {
        "n_points": 60,
        "margin_steps": 20,
        "cross_section": {"n_points": 1, "resolution": 11},
        "transitions": {"n_trajectories": 2, "n_points": 32},
    },
}
FIGURES = ("heatmap", "reliance", "complexity", "cross_sections")


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    res = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join([*cmd, *args])} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        )
    return res


def planned(workdir: Path, change: dict | None = None) -> dict[str, int]:
    """Job counts of a dry run, with `change` merged over the config as --configfile would."""
    args = ["-n", "--cores", "1"]
    if change is not None:
        path = workdir / "change.yaml"
        path.write_text(yaml.safe_dump(change))
        args += ["--configfile", str(path)]
    out = snakemake(workdir, *args).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "all"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    (workdir / "config.yaml").write_text(yaml.safe_dump(MICRO))
    # a fake pool of 2 GPU slots on this CPU machine: each GPU job holds one (nadpipe.slots)
    res = snakemake(workdir, "--cores", "2", "--resources", "gpu=2")
    return workdir, res


def test_summary_parquet_holds_every_cell_condition_and_setting(run):
    workdir, res = run
    assert "results/nad_pairs/summary.parquet" in res.stdout  # the final message names outputs
    console = res.stdout + res.stderr  # one summary line per job, outside the job logs
    # 48 networks: the NADs past rank 47 are arbitrary, and the top-10 split-half overlap is low
    assert "at or past the rank (47) of lenet's NAD covariance" in console
    assert "WARNING: NADs of lenet: split-half top-10 overlap" in console
    assert "evaluate lenet i=0 j=1000 seed=0: test accuracy both" in console
    assert re.search(r"train mlp i=0 j=0 seeds=\[0\]: loss \d\.\d{4}, train acc", console)
    df = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    key = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    assert len(df) == 2 * 4 * 2 * 3 and not df.duplicated(key).any()
    assert set(df["condition"]) == {"both", "ch1_only", "ch2_only"}
    assert set(df["split"]) == {"train", "test"}
    assert df["accuracy"].between(0, 1).all() and (df["loss"] > 0).all()
    row = df.iloc[0]
    assert (row.eps1, row.eps2, row.sigma, row.n_train, row.n_test) == (1.0, 1.0, 1.0, 2000, 1000)
    assert (row.epochs, row.lr_max, row.nad_estimator, row.nad_step) == (10, 0.2, "dipole", 100.0)
    assert set(df["nad_source"]) == {"mlp", "lenet"} and (df["nad_n_networks"] == 48).all()
    # each model's geometry and complexity, repeated on its condition rows
    assert df["reliance_deg"].between(0, 90).all()
    assert df[["margin_v1", "margin_v2"]].gt(0).all().all() and df["margin_v1"].le(10).all()
    assert (df["jacobian_norm_test"] >= 0).all() and (df["jacobian_norm_train"] >= 0).all()
    trans = df[["transitions_same_class", "transitions_diff_class", "transitions_random"]]
    assert (trans > 0).all().all()  # ReLU networks do change pattern along a closed ellipse
    assert (df.groupby(["arch", "nad_i", "nad_j"])["reliance_deg"].nunique() == 1).all()


def test_same_config_gives_a_byte_identical_summary(run, tmp_path):
    workdir, _ = run
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(MICRO))
    snakemake(tmp_path, "--cores", "2")
    summary = "results/nad_pairs/summary.parquet"
    assert (tmp_path / summary).read_bytes() == (workdir / summary).read_bytes()
    # the timings, which differ from run to run, are kept beside it, one row per model
    runs = pd.read_parquet(tmp_path / "results/nad_pairs/runs.parquet")
    assert (
        len(runs) == 8
        and (runs["train_seconds"] > 0).all()
        and (runs["analysis_seconds"] > 0).all()
    )
    assert "train_seconds" not in pd.read_parquet(tmp_path / summary)
    # where each model trained: the slot pool of the first run (gpu=2), none in the second
    first = pd.read_parquet(workdir / "results/nad_pairs/runs.parquet")
    assert set(first["cuda_visible_devices"]) <= {"0", "1"}
    assert set(runs["cuda_visible_devices"]) == {""} and (runs["host"] != "").all()
    assert set(runs["slurm_job_id"]) == {os.environ.get("SLURM_JOB_ID", "")}


def test_lenet_learns_low_nads_and_relies_on_the_lower_index_channel(run):
    workdir, _ = run
    df = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    acc = df[(df.arch == "lenet") & (df.split == "test")].set_index(
        ["nad_i", "nad_j", "condition"]
    )["accuracy"]
    assert acc[0, 0, "both"] > 0.9
    assert acc[1000, 1000, "both"] < 0.75  # the last NAD is hard for LeNet
    # underspecified: both channels solve (0, 1000) and (1000, 0); LeNet uses the NAD-0 channel
    assert acc[0, 1000, "ch1_only"] > 0.85 and acc[0, 1000, "ch2_only"] < 0.65
    assert acc[1000, 0, "ch2_only"] > 0.75 and acc[1000, 0, "ch1_only"] < 0.65
    # the reliance angle says the same: about 0 deg = channel 1, about 90 deg = channel 2
    rel = df[(df.arch == "lenet")].groupby(["nad_i", "nad_j"])["reliance_deg"].first()
    assert rel[0, 1000] < 20 and rel[1000, 0] > 70


def test_cross_sections_are_stored_per_model(run):
    workdir, _ = run
    s = np.load(workdir / "results/nad_pairs/sections/lenet/i1000_j0_s0.npz")
    assert s["values"].shape == (1, 11, 11) and s["a"].shape == (11,)
    assert (int(s["nad_i"]), int(s["nad_j"])) == (1000, 0)
    assert s["a"][0] == -3.0 and s["a"][-1] == 3.0
    f = s["values"][0]  # rows along v2, columns along v1; LeNet uses v2 (its NAD 0) here
    along_v2 = np.abs(f[-1] - f[0]).mean()
    along_v1 = np.abs(f[:, -1] - f[:, 0]).mean()
    assert along_v2 > 3 * along_v1


def test_heatmaps_and_report(run):
    workdir, _ = run
    for arch in ("mlp", "lenet"):
        for fig in FIGURES:
            img = mpimg.imread(workdir / f"results/nad_pairs/plots/{fig}_{arch}.png")
            assert img.shape[0] > 300 and img.shape[1] > 500 and img.std() > 0.05, fig
    snakemake(workdir, "--report", "report.html")
    html = (workdir / "report.html").read_text(errors="replace")
    for fig in FIGURES:
        assert f"{fig}_lenet.png" in html
    assert "nads_lenet.png" in html
    img = mpimg.imread(workdir / "results/nads/plots/nads_lenet.png")
    assert img.shape[0] > 600 and img.std() > 0.05
    assert "channel 2 zeroed" in html and "atan2" in html and "activation-pattern" in html
    assert "config.yaml" in html and "every" in html  # the resolved config and its caption
    used = yaml.safe_load((workdir / "results/config.yaml").read_text())
    assert used["nad_pairs"]["n_train"] == 2000 and used["nads"]["step"] == 100.0  # default filled


def test_config_changes_replan_only_the_cells_they_touch(run):
    workdir, _ = run
    assert planned(workdir) == {}
    per_cell = ("pair_dataset", "train_pair", "evaluate_pair", "analyze_pair")
    # every change: the summary, its figures, and the resolved config of the report
    summary = {
        "aggregate_pairs": 1,
        "plot_pair_heatmap": 2,
        "plot_pair_metrics": 4,
        "resolved_config": 1,
    }
    # a new seed: its 8 cells, then the summary and its figures; no NADs; the cross-section
    # figures show the first seed only and stay
    assert planned(workdir, {"nad_pairs": {"seeds": [0, 1]}}) == {
        **dict.fromkeys(per_cell, 8),
        **summary,
    }
    # a new NAD index: 3x3 - 2x2 = 5 new pairs per architecture
    assert planned(workdir, {"nad_pairs": {"indices": [0, 10, 1000]}}) == {
        **dict.fromkeys(per_cell, 10),
        **summary,
        "plot_cross_sections": 2,
    }
    # one architecture's training: only its models, no data or NADs
    assert planned(workdir, {"nad_pairs": {"train_per_arch": {"lenet": {"epochs": 11}}}}) == {
        "train_pair": 4,
        "evaluate_pair": 4,
        "analyze_pair": 4,
        **summary,
        "plot_cross_sections": 1,
    }
    # evaluation only: no retraining
    assert planned(workdir, {"nad_pairs": {"eval_batch_size": 123}}) == {
        "evaluate_pair": 8,
        **summary,
    }
    # analysis only: no retraining, no re-evaluation
    assert planned(workdir, {"analysis": {"margin_max": 5.0}}) == {
        "analyze_pair": 8,
        **summary,
        "plot_cross_sections": 2,
    }
    # one architecture's NAD settings: its NADs and everything downstream of them only
    assert planned(workdir, {"architectures": {"mlp": {"nads": {"n_networks": 20}}}}) == {
        "nads": 1,
        "plot_nads": 1,
        **dict.fromkeys(per_cell, 4),
        **summary,
        "plot_cross_sections": 1,
    }


def test_bad_config_stops_before_any_job(tmp_path):
    bad = {**MICRO, "nad_pairs": {**MICRO["nad_pairs"], "indices": [0, 2000]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(bad))
    res = snakemake(tmp_path, "--cores", "1", check=False)
    assert res.returncode != 0
    assert "nad_pairs.indices.1" in res.stdout + res.stderr
    assert not (tmp_path / "results").exists()


def test_grouped_seeds_train_as_one_job_and_match_per_seed_jobs(run, tmp_path):
    workdir, _ = run
    grouped = {
        **MICRO,
        "nad_pairs": {
            **MICRO["nad_pairs"],
            "architectures": ["mlp"],
            "seeds": [0, 1],
            "group_seeds": True,
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(grouped))
    plan = planned(tmp_path)
    assert plan["train_pair_seeds"] == 4 and "train_pair" not in plan  # one job per (i, j)
    assert plan["evaluate_pair"] == 8  # still one artifact per (cell, seed)
    snakemake(tmp_path, "--cores", "2")
    key = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    g = pd.read_parquet(tmp_path / "results/nad_pairs/summary.parquet").set_index(key)
    single = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet").set_index(key)
    assert len(g) == 4 * 2 * 6
    common = single.loc["mlp"].index.intersection(g.loc["mlp"].index)
    assert len(common) == 4 * 6  # seed 0 of every cell
    diff = (g.loc["mlp"].loc[common, "accuracy"] - single.loc["mlp"].loc[common, "accuracy"]).abs()
    assert diff.max() <= 0.01  # equal up to floating-point differences of the batched model
    record = json.loads((tmp_path / "results/nad_pairs/models/mlp/i0_j1000_s1.json").read_text())
    assert record["trained_with_seeds"] == 2 and len(record["history"]) == 10


def test_a_corrupt_artifact_is_named_with_the_command_that_rebuilds_it(run, tmp_path):
    workdir, _ = run
    copy = tmp_path / "wf"
    shutil.copytree(workdir, copy)
    spec = "results/nad_pairs/datasets/lenet/i0_j0_s0.pt"
    data = (copy / spec).read_bytes()
    (copy / spec).write_bytes(data[: len(data) // 3])
    res = snakemake(
        copy, "--cores", "1", "--force", "results/nad_pairs/models/lenet/i0_j0_s0.pt", check=False
    )
    assert res.returncode != 0
    log = (copy / "logs/nad_pairs/train/lenet/i0_j0_s0.log").read_text()
    assert f"{spec} cannot be read" in log and f"snakemake --cores all --force {spec}" in log
    # the command it names does rebuild it
    snakemake(copy, "--cores", "1", "--force", spec)
    assert (copy / spec).read_bytes() == data


def test_a_diverging_training_is_recorded_and_the_grid_goes_on(tmp_path):
    cfg = {
        **MICRO,
        "nad_pairs": {
            **MICRO["nad_pairs"],
            "architectures": ["mlp"],
            "indices": [0, 1000],
            "train_per_arch": {"mlp": {"lr_max": 1.0e4, "grad_clip": None}},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(tmp_path, "--cores", "2")
    df = pd.read_parquet(tmp_path / "results/nad_pairs/summary.parquet")
    assert len(df) == 4 * 6 and df["diverged"].all()
    assert df["accuracy"].isna().all() and df["reliance_deg"].isna().all()
    assert (df["diverged_epoch"] >= 1).all()
    for fig in ("heatmap", "reliance", "complexity"):  # still drawn, the cells hatched in red
        img = mpimg.imread(tmp_path / f"results/nad_pairs/plots/{fig}_mlp.png")
        red = (img[..., 0] > 0.8) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)
        assert red.sum() > 500, fig
    img = mpimg.imread(tmp_path / "results/nad_pairs/plots/cross_sections_mlp.png")
    assert ((img[..., 0] > 0.8) & (img[..., 1] < 0.3)).sum() > 50  # "diverged" in red
    # as a hard failure: the run stops, and the log names the reason
    cfg["nad_pairs"]["train"] = {**cfg["nad_pairs"]["train"], "fail_on_divergence": True}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(tmp_path, "--cores", "1", check=False)
    assert res.returncode != 0
    logs = "".join(p.read_text() for p in (tmp_path / "logs/nad_pairs/train/mlp").glob("*.log"))
    assert "TrainingDiverged" in logs and "fail_on_divergence" in logs
