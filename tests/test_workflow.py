"""The real Snakemake DAG end to end on a micro config: the results, what a config change
re-plans, and what a user is told (and what happens when they do it) when something is off."""

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import psutil
import pytest
import torch
import yaml
from conftest import REPO, SCHEMA
from helpers import (
    SNAKEMAKE,
    command,
    planned,
    run_snakemake,
    snakemake,
    snakemake_command,
    snakemake_here,
    suggested,
    undeclared,
)

import nadpipe
from nadpipe import config as nc
from nadpipe import findings, plots
from nadpipe.grid import Plan
from nadpipe.row import RUN, names
from nadpipe.signatures import LOW

MICRO = {
    "architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [64]}}, "lenet": {}},
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
        "n_points": 24,
        "margin_steps": 12,
        "cross_section": {"n_points": 1, "resolution": 11},
        "transitions": {"n_trajectories": 1, "n_points": 16},
    },
}
FIGURES = ("heatmap", "reliance", "complexity", "cross_sections")


MICRO_ARCHS = {"mlp": "mlp", "lenet": "lenet"}  # the architectures MICRO runs, and their models


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    (workdir / "config.yaml").write_text(yaml.safe_dump(MICRO))
    # --resources gpu=2 on a machine without a GPU: no slot pool (nadpipe.runner.slots), the CPU
    res = snakemake(workdir, "--cores", "2", "--resources", "gpu=2", umask=0o022)
    return workdir, res


def test_summary_parquet_holds_every_cell_condition_and_setting(run):
    workdir, res = run
    console = res.stdout + res.stderr  # one summary line per job, outside the job logs
    assert "results/nad_pairs/summary.parquet" in console  # the final message names outputs
    # ... and what they show, as the report's first page says it (computed from the rows)
    found = console.split("What the results show:")[1]
    assert ("- nad_pairs: lenet (1 seed per cell): the lower NAD index: relied on the channel of "
            "the lower NAD") in found  # fmt: skip
    # the timings, which differ from run to run, are kept beside it, one row per model, with
    # where each model trained: no GPU slot here (820f241 made a pool of GPUs 0 and 1 on this
    # CPU machine for --resources gpu=2)
    runs = pd.read_parquet(workdir / "results/nad_pairs/runs.parquet")
    assert len(runs) == 8 and (runs["train_seconds"] > 0).all() and (runs["eval_seconds"] > 0).all()
    assert "train_seconds" not in pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    # a value that does not exist is null (0.4: "")
    assert runs["cuda_visible_devices"].isna().all() and runs["host"].str.len().gt(0).all()
    job = os.environ.get("SLURM_JOB_ID")
    assert list(runs["slurm_job_id"].unique()) == [job]
    # ... and Snakemake's log file holds it too
    logs = (workdir / ".snakemake/log").glob("*.snakemake.log")
    assert any("nadpipe finished. Results:" in log.read_text() for log in logs)
    # 48 networks: the NADs past rank 47 are arbitrary, and the top-10 split-half overlap is low
    assert "at or past the rank (47) of lenet's NAD covariance" in console
    assert "NADs of lenet: split-half top-10 overlap" in console
    assert "evaluate nad_pairs lenet i0_j1000 seed=0: test accuracy both" in console
    assert re.search(
        r"train nad_pairs mlp i0_j0 seeds=\[0\]: train loss \d\.\d{4}, train accuracy "
        r"\d\.\d{3}, test accuracy \d\.\d{3} \(on cpu\)",
        console,
    )
    log = (workdir / "results/logs/nad_pairs/train/mlp/i0_j0_s0.log").read_text()
    assert re.search(r"epoch 10/10: train loss \d\.\d{4}, train accuracy \d\.\d{4}", log)
    # the end of the run repeats every warning its jobs wrote
    tail = console.split("Warnings of this run")[1]
    assert "at or past the rank (47)" in tail and "NADs of lenet: split-half top-10 overlap" in tail
    # the MLP's spectrum looks flat, but from 48 networks of 1024 coordinates that cannot be
    # told from one they cannot resolve: more networks, says the warning (1100 in the default
    # study: "nearly isotropic", no warning)
    assert "NADs of mlp: split-half top-10" in tail and "a flat spectrum cannot be told" in tail
    df = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    key = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    assert len(df) == 2 * 4 * 2 * 3 and not df.duplicated(key).any()
    assert set(df["condition"]) == {"both", "ch1_only", "ch2_only"}
    assert set(df["split"]) == {"train", "test"}
    assert df["accuracy"].between(0, 1).all() and (df["loss"] > 0).all()
    row = df.iloc[0]
    assert (row.eps1, row.eps2, row.sigma, row.n_train, row.n_test) == (1.0, 1.0, 1.0, 2000, 1000)
    assert (row.epochs, row.lr_max, row.lr_schedule) == (10, 0.2, "triangular")
    assert (row.nad_estimator, row.nad_step) == ("dipole", 100.0)
    assert set(df["nad_source"]) == {"mlp", "lenet"} and (df["nad_n_networks"] == 48).all()
    # each model's geometry and complexity, repeated on its condition rows
    assert df["reliance_deg"].between(0, 90).all()
    found = df[["margin_v1", "margin_v2"]].replace(np.inf, np.nan)
    assert ((found > 0) | found.isna()).all().all() and (found.fillna(0) <= 10).all().all()
    assert df[["margin_v1_found", "margin_v2_found"]].stack().between(0, 1).all()
    assert (df["jacobian_norm_test"] >= 0).all() and (df["jacobian_norm_train"] >= 0).all()
    trans = df[["transitions_same_class", "transitions_diff_class", "transitions_random"]]
    assert (trans > 0).all().all()  # ReLU networks do change pattern along a closed ellipse
    assert (df.loc[df.arch == "mlp", "relu_units"] == 64).all()
    assert (df.groupby(["arch", "nad_i", "nad_j"])["reliance_deg"].nunique() == 1).all()
    # provenance: the library that made each row
    from nadpipe import __version__
    from nadpipe.provenance import source_hash

    assert set(df["nadpipe_version"]) == {__version__} and set(df["nadpipe_source"]) == {
        source_hash()
    }
    assert df["torch_version"].str.len().gt(0).all()
    # one declared row (nadpipe.row, docs/summary.md): every column; what does not exist is null
    assert undeclared(df) == [] and undeclared(runs) == []
    assert df["protocol"].isna().all() and df["nad_file"].isna().all()  # 0.4: ""
    fit = df["outcome"] == "fit"
    assert df.loc[fit, "outcome_reason"].isna().all() and df["diverged_epoch"].isna().all()
    # a collaborator can read every result: the mode of the umask (022), not mkstemp's 0600
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (workdir / "results").rglob("*")}
    assert {m for p, m in modes.items() if p.is_file()} == {0o644}, modes
    record = json.loads((workdir / "results/nad_pairs/models/lenet/i0_j0_s0.json").read_text())
    nads = json.loads((workdir / "results/nads/lenet.json").read_text())
    assert (
        record["provenance"]["nadpipe_source"]
        == nads["provenance"]["nadpipe_source"]
        == source_hash()
    )


def test_a_results_folder_too_deep_for_a_socket_still_gets_the_warm_server(tmp_path, monkeypatch):
    # a socket's path binds up to about 100 bytes (Linux 107): the server of a results folder
    # deeper than that failed to start (worker.log alone said so) and every job started cold,
    # 2 to 4 s each (test_acceptance's run took 63 s for 18); it now listens in the temp folder
    from nadpipe.jobtable import start_server
    from nadpipe.runner import worker
    from nadpipe.runner.lifecycle import orphans

    monkeypatch.setenv(worker.ENV, "")  # restored after the test
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "results" / ".nadpipe"
    server = start_server(str(deep))
    try:
        path = os.environ[worker.ENV].rpartition(":")[0]
        assert len(os.fsencode(path)) <= worker.MAX_SOCKET_PATH, path
        code = ("import os; from nadpipe.jobtable import run_job; "
                "print(os.getpid(), run_job('process')[0])")  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        job, ran_in = map(int, out.stdout.split())
        assert ran_in != job, (deep / "worker.log").read_text()  # a child of the warm server
        # which inherited the server's objects frozen for the garbage collector: its
        # collections leave the inherited heap alone. The server imports torch with the first
        # job whose module needs it (torch's objects alone are about 400 000), not before: a
        # run that only draws figures never imports it. A training's job (its arguments
        # missing: it fails in the child, after the server imported its module)
        code = ("from nadpipe.jobtable import run_job\n_, before, torch = run_job('process')\n"
                "try:\n    run_job('train')\nexcept SystemExit:\n    pass\n"
                "print(before, torch, *run_job('process')[1:])")  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        before, torch_before, after, torch_after = out.stdout.split()
        assert 0 < int(before) < 100_000 < int(after), out.stdout + out.stderr
        assert (torch_before, torch_after) == ("False", "True")
        # and a killed run's next run still finds it by its folder (runs.orphans)
        assert server.pid in orphans(str(deep.parent.parent), "results")
    finally:
        server.terminate()
        server.wait()
    assert not os.path.exists(path)  # the server removes its socket


def test_a_job_that_fails_in_the_warm_server_is_said_by_its_root_cause(tmp_path, monkeypatch):
    from nadpipe.jobtable import start_server
    from nadpipe.log import said
    from nadpipe.runner import worker

    monkeypatch.setenv(worker.ENV, "")
    server = start_server(str(tmp_path / "results/.nadpipe"))
    try:  # an OSError: its message and errno, not only the last exception's riddle
        code = (
            "from nadpipe.jobtable import run_job; "
            "run_job('resolved_config', {}, '/dev/full/x', '/dev/full/y')"
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert res.returncode == 1 and "File exists (EEXIST: /dev/full)" in res.stderr, res.stderr
    finally:
        server.terminate()
        server.wait()
    # a full disk as torch.save meets it: the cause first (0a58d4e said only the RuntimeError)
    try:
        try:
            raise OSError(28, "No space left on device", "results/nads/x.pt")
        except OSError as e:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") from e
    except RuntimeError as e:
        line = said(e)
    assert line.startswith("No space left on device (ENOSPC: results/nads/x.pt), which ended")
    assert said(SystemExit(0)) == "the job was stopped (SystemExit 0)"


def test_the_same_config_gives_byte_identical_results_with_or_without_the_warm_worker(
    run, tmp_path
):
    workdir, _ = run
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(MICRO))
    # a cell and the NADs it rests on, each job in its own Python (the summary is the cells'
    # rows concatenated; the warm server serves every job alike, whatever its architecture)
    no_worker = {**os.environ, "NADPIPE_NO_WORKER": "1"}
    cells = ["results/nad_pairs/eval/mlp/i0_j1000_s0"]  # the cheaper to train
    targets = [f"{c}.parquet" for c in cells]
    snakemake(tmp_path, "--cores", "2", *targets, env=no_worker)
    paths = ["results/nads/mlp.pt", "results/nads/mlp.npy",
             *(c.replace("/eval/", "/models/") + ".pt" for c in cells)]  # fmt: skip
    for path in paths:
        assert (tmp_path / path).read_bytes() == (workdir / path).read_bytes(), path
    # a cell's table also carries its wall times and host (the summary moves them to
    # runs.parquet, so summary.parquet is byte-identical): every other value is equal exactly
    for path in targets:
        again, first = (pd.read_parquet(d / path) for d in (tmp_path, workdir))
        assert (again["train_seconds"] != first["train_seconds"]).all()  # really two runs
        pd.testing.assert_frame_equal(
            again.drop(columns=names(RUN)), first.drop(columns=names(RUN)), check_exact=True
        )


def test_a_finished_study_run_again_says_its_results_and_standing_warnings(run):
    workdir, _ = run
    res = snakemake(workdir, "--cores", "1")
    out = res.stdout + res.stderr
    assert "Nothing to be done" in out  # Snakemake's words; at 820f241 nothing more
    assert "nadpipe: nothing to do, every result is up to date:" in out
    assert "results/nad_pairs/summary.parquet" in out.split("nothing to do")[1]
    assert "Warnings that stand for these results" in out and "NADs of lenet" in out
    report = suggested(workdir, "--report", "results/report.html")
    assert f"The report (figures, tables, the config that ran): {report}" in out
    newest = max((workdir / ".snakemake/log").glob("*.snakemake.log"), key=os.path.getmtime)
    assert "nadpipe: nothing to do, every result is up to date:" in newest.read_text()


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
    s = np.load(workdir / "results/nad_pairs/eval/lenet/i1000_j0_s0.npz")
    assert s["values"].shape == (1, 11, 11) and s["a"].shape == (11,)
    assert (int(s["key_nad_i"]), int(s["key_nad_j"])) == (1000, 0)
    assert s["a"][0] == -3.0 and s["a"][-1] == 3.0
    f = s["values"][0]  # rows along v2, columns along v1; LeNet uses v2 (its NAD 0) here
    assert np.abs(f[-1] - f[0]).mean() > 3 * np.abs(f[:, -1] - f[:, 0]).mean()


def test_figures_and_report(run):
    workdir, res = run
    for arch in ("mlp", "lenet"):
        for fig in FIGURES:
            img = mpimg.imread(workdir / f"results/nad_pairs/plots/{fig}_{arch}.png")
            assert img.shape[0] > 300 and img.shape[1] > 500 and img.std() > 0.05, fig
    img = mpimg.imread(workdir / "results/nads/plots/nads_lenet.png")
    assert img.shape[0] > 600 and img.std() > 0.05
    assert np.load(workdir / "results/nads/lenet.npy").shape == (1024, 1024)
    signatures = pd.read_parquet(workdir / "results/signatures/overlaps.parquet")
    assert set(signatures["arch_b"]) == {"mlp", "lenet", LOW}
    used = yaml.safe_load((workdir / "results/config.yaml").read_text())
    assert used["nad_pairs"]["n_train"] == 2000 and used["nads"]["step"] == 100.0  # default filled
    # the architectures that ran, each with its model (b879b52: config entries, used or not)
    assert {a: e["model"] for a, e in used["architectures"].items()} == MICRO_ARCHS
    # the report command the end of the run printed, with the run's own options, as typed
    said = re.search(r"The report \(figures, tables, the config that ran\): (\S*snakemake .*)$",
                     res.stdout + res.stderr, re.M)[1]  # fmt: skip
    assert said == suggested(workdir, "--report", "results/report.html")
    command(workdir, said)
    html = (workdir / "results/report.html").read_text(errors="replace")
    for fig in FIGURES:
        assert f"{fig}_lenet.png" in html
    assert "nads_lenet.png" in html and "summary_nad_pairs.html" in html
    assert "channel 2 zeroed" in html and "atan2" in html and "activation-pattern" in html
    assert "Headline numbers" in html and "What ran" in html  # the landing page
    landing = (workdir / "results/report/landing.rst").read_text()
    assert landing.count(".. image:: data:image/png;base64,") == 2  # reliance, per architecture
    # the page leads with the figure of the architecture that carries the finding (LeNet chose
    # the lower NAD index; the MLP, the control, weighs by margin: 0.11.0 led with the MLP's),
    # under its caption, across the page; the other's after the headline numbers
    first, what_ran, other = (landing.index(t) for t in (
        "Channel reliance of lenet per NAD pair", "What ran",
        "Channel reliance of mlp per NAD pair"))  # fmt: skip
    assert first < landing.index(".. image::") < what_ran < other
    assert "reliance_lenet.png (its caption" not in landing  # a caption, not a file name
    assert landing.count(":width: 100%") == 2
    assert "config.html" in html  # the config as a page (b879b52: a .yaml to download)
    assert "System Message" not in html and "Docutils" not in html  # every caption renders


def test_config_changes_replan_only_the_cells_they_touch(run):
    workdir, _ = run
    assert planned(workdir) == {}
    # every change: the summary, its figures, its table, the landing page and the config
    summary = {"aggregate": 1, "report_summary": 1, "report_landing": 1, "resolved_config": 1}
    per_cell = ("train", "evaluate")
    # a new seed: its 8 cells; the cross-section figures show the first seed only and stay
    assert planned(workdir, {"nad_pairs": {"seeds": [0, 1]}}) == {
        **dict.fromkeys(per_cell, 8),
        **summary,
        "plot": 6,
    }
    # a new NAD index: 3x3 - 2x2 = 5 new pairs per architecture
    assert planned(workdir, {"nad_pairs": {"indices": [0, 10, 1000]}}) == {
        **dict.fromkeys(per_cell, 10),
        **summary,
        "plot": 8,
    }
    # one architecture's training: only its models, no NADs
    assert planned(workdir, {"nad_pairs": {"train_per_arch": {"lenet": {"epochs": 11}}}}) == {
        **dict.fromkeys(per_cell, 4),
        **summary,
        "plot": 7,
    }
    # evaluation or analysis only: no retraining
    assert planned(workdir, {"nad_pairs": {"eval_batch_size": 123}}) == {
        "evaluate": 8,
        **summary,
        "plot": 8,
    }
    assert planned(workdir, {"analysis": {"margin_max": 5.0}}) == {
        "evaluate": 8,
        **summary,
        "plot": 8,
    }
    # one architecture's NAD settings: its NADs and everything downstream of them only
    assert planned(workdir, {"architectures": {"mlp": {"nads": {"n_networks": 40}}}}) == {
        "nads": 1,
        "plot_nads": 1,
        "signatures": 1,
        **dict.fromkeys(per_cell, 4),
        **summary,
        "plot": 7,
    }
    # the warning threshold of the NAD figure: the figure only
    assert planned(workdir, {"nads": {"min_overlap_top10": 0.1}}) == {
        "plot_nads": 2,
        "resolved_config": 1,
        "report_landing": 1,
    }


def test_bad_config_stops_before_any_job(tmp_path):
    bad = {**MICRO, "nad_pairs": {**MICRO["nad_pairs"], "indices": [0, 2000]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(bad))
    res = snakemake(tmp_path, "--cores", "1", check=False)
    assert res.returncode != 0
    assert "nad_pairs.indices.1" in res.stdout + res.stderr
    assert not (tmp_path / "results").exists()
    # a YAML syntax error in config.yaml: the file and the line (Snakemake's message has neither)
    (tmp_path / "config.yaml").write_text("nad_pairs:\n  indices: [0, 10\n  seeds: [0]\n")
    res = snakemake_here(tmp_path, "-n", check=False)
    assert res.returncode != 0
    assert "config.yaml, line 3, column 8: not valid YAML" in res.stdout + res.stderr


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
    copy = _copy(workdir, tmp_path)  # its NADs as they were: the same networks, not recomputed
    (copy / "config.yaml").write_text(yaml.safe_dump(grouped))
    plan = planned(copy)
    assert plan["train_nad_pairs_seeds"] == 4 and "train" not in plan  # one job per (i, j)
    assert plan["evaluate"] == 8 and "nads" not in plan  # still one artifact per (cell, seed)
    snakemake(copy, "--cores", "2", "results/nad_pairs/summary.parquet")
    key = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    g = pd.read_parquet(copy / "results/nad_pairs/summary.parquet").set_index(key)
    single = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet").set_index(key)
    assert len(g) == 4 * 2 * 6
    common = single.loc["mlp"].index.intersection(g.loc["mlp"].index)
    assert len(common) == 4 * 6  # seed 0 of every cell
    diff = (g.loc["mlp"].loc[common, "accuracy"] - single.loc["mlp"].loc[common, "accuracy"]).abs()
    assert diff.max() <= 0.01  # equal up to floating-point differences of the batched model
    record = json.loads((copy / "results/nad_pairs/models/mlp/i0_j1000_s1.json").read_text())
    assert record["trained_with_seeds"] == 2 and len(record["history"]) == 10


def test_cells_trained_together_equal_cells_trained_alone(run, tmp_path):
    # as on a GPU (where it is the default): the MLP's four cells as one batch (LeNet's batches
    # are compared with LeNet alone in tests/test_batches.py; what reruns, in
    # tests/test_batch_runs.py)
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    (copy / "config.yaml").write_text(yaml.safe_dump({**MICRO, "gpus": {"batch_cells": 4}}))
    for p in [*(copy / "results/nad_pairs/models/mlp").glob("*"),
              *(copy / "results/nad_pairs/eval/mlp").glob("*"),
              copy / "results/nad_pairs/summary.parquet"]:  # fmt: skip
        p.unlink()
    res = snakemake(copy, "--cores", "2", "results/nad_pairs/summary.parquet")
    assert "by its batch's job; claimed" in res.stdout + res.stderr
    for cell in ("i0_j0", "i0_j1000", "i1000_j0", "i1000_j1000"):
        path = copy / f"results/nad_pairs/models/mlp/{cell}_s0.json"
        assert json.loads(path.read_text())["trained_together"] == 4, cell
    key = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    batched = pd.read_parquet(copy / "results/nad_pairs/summary.parquet").set_index(key)
    alone = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet").set_index(key)
    diff = (batched["accuracy"] - alone["accuracy"]).abs()
    # the same trainings up to float rounding (tests/test_batches.py: weights equal to 1e-6
    # after ten steps; over longer trainings rounding grows where a model sits at the edge of
    # what it learns, as in any two float-different runs)
    assert diff.loc["mlp"].max() <= 0.01, diff.sort_values().tail()
    left = planned(copy, {"gpus": {"batch_cells": 4}})  # the figures were not asked for
    assert not {"nads", "train", "evaluate", "aggregate"} & set(left)  # each cell's job is done
    assert not (copy / "results/.nadpipe/ahead").exists()  # every result claimed, none left


def _copy(workdir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "wf"
    shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns(".nadpipe"))
    return copy


def test_a_corrupt_artifact_is_named_and_the_command_given_rebuilds_everything(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    model = "results/nad_pairs/models/mlp/i0_j0_s0.pt"  # an MLP: a short retraining
    data = (copy / model).read_bytes()
    (copy / model).write_bytes(data[: len(data) // 3])
    (copy / "results/nad_pairs/eval/mlp/i0_j0_s0.parquet").unlink()  # its evaluation is due
    res = snakemake(copy, "--cores", "1", check=False)
    assert res.returncode != 0
    # the failed ending: said last, naming no result as made, the job's log named above it
    out = res.stdout + res.stderr
    said = out.rindex("nadpipe stopped: a job failed (its log is named above).")
    assert out.rindex("results/logs/nad_pairs/evaluate/mlp/i0_j0_s0.log") < said
    assert "nadpipe finished" not in out and "nothing to do" not in out
    log = (copy / "results/logs/nad_pairs/evaluate/mlp/i0_j0_s0.log").read_text()
    match = re.search(r"Rebuild it with: (\S*snakemake .*)$", log, re.M)
    assert f"{model} cannot be read" in log and match
    assert match[1] == suggested(copy, "--cores", "all", "--forcerun", model)
    # exactly the command it names: the model, its evaluation and everything made from them
    command(copy, match[1])
    assert (copy / model).read_bytes() == data  # the same bytes: training is deterministic
    assert planned(copy) == {}  # nothing left stale
    a = pd.read_parquet(copy / "results/nad_pairs/summary.parquet")
    b = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    pd.testing.assert_frame_equal(a, b)


def test_results_made_by_other_library_source_are_named_with_the_command(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    # as if an older checkout of the library had made a model (a NAD file is a record of the
    # same kind; one MLP keeps the rerun small)
    stale = ["results/nad_pairs/models/mlp/i0_j0_s0.json"]
    for path in stale:
        st = (copy / path).stat()
        record = json.loads((copy / path).read_text())
        record["provenance"]["nadpipe_source"] = "0123456789abcdef"
        (copy / path).write_text(json.dumps(record))
        os.utime(copy / path, ns=(st.st_atime_ns, st.st_mtime_ns))  # as made then
    res = snakemake_here(copy, "-n", "--cores", "1")
    out = res.stdout + res.stderr
    assert "1 result(s) on disk were made by other nadpipe library source" in out
    assert "1 of rule train" in out
    assert planned(copy) == {}  # it says so; it does not rerun by itself
    given = re.search(r"(\S*snakemake .*--forcerun [\w /.]+)", out)[1]
    assert given == suggested(copy, "--cores", "all", "--forcerun", *stale)
    command(copy, given)
    out = snakemake_here(copy, "-n", "--cores", "1").stdout
    assert "other nadpipe library source" not in out and "Nothing to be done" in out


def _holding(copy: Path, first: subprocess.Popen) -> None:
    """Freeze `first` (SIGSTOP) once it holds the run lock: it holds it until it is continued,
    however fast its jobs are (no sleep decides the test)."""
    from nadpipe.paths import RUN_LOCK, at
    from nadpipe.runner.lifecycle import holder

    lock = at(RUN_LOCK, "results")
    deadline = time.time() + 120
    while time.time() < deadline and first.poll() is None:
        first.send_signal(signal.SIGSTOP)
        # held, and its holder written (take_lock writes it just after it locks)
        if f"snakemake pid {first.pid}," in (holder(str(copy / lock))[0] or ""):
            return
        first.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the first run never held {lock} (exit {first.poll()})")


def test_a_second_run_in_the_same_directory_is_told_what_is_going_on(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    # a first run that executes jobs (the NAD figures again), frozen while it holds the lock
    cmd = snakemake_command(copy, "--cores", "1", "--forcerun", "plot_nads")
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _holding(copy, first)
    try:
        # a run, and a dry run (Snakemake's -n would call the first run's unfinished files
        # incomplete): both stop at once with the same advice, which holds whatever they are
        for args in (("--cores", "1"), ("-n", "--cores", "1")):
            second = snakemake(copy, *args, check=False)
            out = second.stdout + second.stderr
            assert second.returncode != 0
            said = "another run is executing jobs that write results/, this command's results"
            assert f"{said} folder (snakemake pid {first.pid}" in out
            assert "--rerun-incomplete" not in out and "wait for it to end" in out.lower()
            assert "Traceback" not in out
    finally:
        first.send_signal(signal.SIGCONT)
    first.wait(timeout=300)
    assert first.returncode == 0
    # what it says to do: run the command again once the first has ended
    assert snakemake(copy, "--cores", "1").returncode == 0
    assert planned(copy) == {}


def test_commands_that_run_no_job_never_lock_start_or_write(run, tmp_path):
    """The run machinery starts from Snakemake's onstart: a dry run, --lint, --summary,
    --list-rules, --unlock and --report leave nadpipe's state (.nadpipe), its model-check cache
    and the results as they were, start no job server and take no lock; a run of one job takes
    the lock."""
    from nadpipe.paths import RUN_LOCK, at
    from nadpipe.runner.lifecycle import holder

    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    cache = tmp_path / "cache"  # where the model checks that passed are remembered
    env = {**os.environ, "NADPIPE_CACHE": str(cache)}

    def state() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(copy)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in copy.rglob("*")
            if p.is_file() and ".snakemake" not in p.parts and p.name != "report.html"
        }

    before = state()
    for args in (
        ("-n", "--cores", "1"),
        ("--lint",),
        ("--summary",),
        ("--list-rules",),
        ("--unlock",),
        ("--report", "report.html"),
        ("-n", "--cores", "1", "--forcerun", "plot"),  # a dry run with work to plan
    ):
        res = snakemake_here(copy, *args, check=False, env=env)
        assert res.returncode == 0, (args, res.stderr[-2000:])
        assert state() == before, args
        assert not (copy / ".nadpipe").exists() and not cache.exists(), args
        assert not (copy / "results/.nadpipe").exists(), args
    assert (copy / "report.html").stat().st_size > 100_000  # --report did its own work
    # a run that executes a job starts the machinery at onstart: its lock names it
    snakemake(copy, "--cores", "1", "--forcerun", "plot_nads", env=env)
    held, last = holder(str(copy / at(RUN_LOCK, "results")))
    assert held is None and "--forcerun plot_nads" in last
    assert (copy / "results/.nadpipe/worker.log").exists()
    # and remembers its model checks: the MLP with kwargs, for training and for its NADs
    assert len(list((cache / "model-checks").iterdir())) == 2


def test_a_deleted_intermediate_is_rebuilt_as_the_readme_says(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    model = "results/nad_pairs/models/mlp/i0_j0_s0.pt"
    (copy / model).unlink()
    # what Snakemake does (README, "Deleting a file by hand"): the results made from it are up
    # to date, so a plain run does not rebuild it
    assert planned(copy) == {}
    # asked for by name, it alone is rebuilt; --forcerun rebuilds it and everything made from it
    assert "train" in snakemake_here(copy, "-n", "--cores", "1", model).stdout
    command(copy, suggested(copy, "--cores", "all", "--forcerun", model))
    assert (copy / model).read_bytes() == (workdir / model).read_bytes()
    assert planned(copy) == {}


def test_a_killed_run_says_both_steps_and_its_live_jobs_and_following_it_finishes(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    # work for a run to do (the summary too: deleted intermediates alone are not rebuilt while
    # the results made from them are newer), a training among it
    for p in [
        *(copy / "results/nad_pairs/eval/mlp").glob("*"),
        *(copy / "results/nad_pairs/models/lenet").glob("i1000_j1000_s0.*"),
        *(copy / "results/nad_pairs/eval/lenet").glob("i1000_j1000_s0.*"),
        copy / "results/nad_pairs/summary.parquet",
    ]:
        p.unlink()
    cmd = snakemake_command(copy, "--cores", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def running_job() -> bool:  # a job script of this run has started (Snakemake holds its lock)
        for kid in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):  # a child that has just ended
                if ".snakemake/scripts" in " ".join(kid.cmdline()):
                    return True
        return False

    deadline = time.time() + 90
    while not running_job() and time.time() < deadline:
        time.sleep(0.05)
    # Snakemake alone dies (a lost login session); its jobs live on (stopped here, so that they
    # are still there when the next run looks, however short they are)
    jobs = psutil.Process(proc.pid).children(recursive=True)
    for job in jobs:
        job.send_signal(signal.SIGSTOP)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = snakemake(copy, "--cores", "2", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "the last run that wrote results/ was killed" in out
    assert f"snakemake pid {proc.pid}" in out
    # Snakemake stopped on its lock: no false last line (b879b52: "nadpipe: nothing to do,
    # every result is up to date: results/nad_pairs/summary.parquet", which did not exist)
    assert "LockException" in out or "cannot be locked" in out
    assert "nothing to do" not in out
    steps = re.findall(r"`([^`]+)`", out.split("was killed")[1])
    pids = [int(p) for p in re.search(r"\(pids ([\d ]+)\)", out)[1].split()]
    assert set(pids) == {job.pid for job in jobs} and pids
    assert steps[0] == f"kill {' '.join(map(str, pids))}"
    assert steps[1] == suggested(copy, "--unlock")
    assert steps[2].startswith(suggested(copy, "--cores", "all"))
    for pid in pids:  # exactly what it says, in its order
        os.kill(pid, signal.SIGKILL)
    # the same advice however the command is started: a wrapper's command line names snakemake
    # too, and is this command's own parent, not another run starting (0a58d4e: "Wait for it")
    wrappers = [["timeout", "900"], ["nice"]] + [["/usr/bin/time", "-v"]] * bool(
        shutil.which("/usr/bin/time")
    )
    for wrapper in wrappers:
        res = subprocess.run(
            [*wrapper, *snakemake_command(copy, "--cores", "2")], capture_output=True, text=True
        )
        out = res.stdout + res.stderr
        assert "was killed" in out and "Wait for it" not in out, wrapper
        assert re.findall(r"`([^`]+)`", out.split("was killed")[1])[0] == steps[1], wrapper
    # a command that asked for one file: the advice asks for it too (10c1e0f: the whole study,
    # 15 jobs instead of 1)
    target = "results/nad_pairs/summary.parquet"
    res = subprocess.run(snakemake_command(copy, target, "--cores", "2"), capture_output=True,
                         text=True)  # fmt: skip
    asked = re.findall(r"`([^`]+)`", (res.stdout + res.stderr).split("was killed")[1])
    # (its jobs stopped by now: the two steps alone)
    assert asked[0] == steps[1] and asked[1].startswith(suggested(copy, target, "--cores", "all"))
    for step in steps[1:]:
        command(copy, step)
    assert planned(copy) == {}
    a = pd.read_parquet(copy / "results/nad_pairs/summary.parquet")
    pd.testing.assert_frame_equal(a, pd.read_parquet(workdir / "results/nad_pairs/summary.parquet"))


def test_suggested_commands_keep_the_config_files_the_run_was_started_with(run, tmp_path):
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    # a subset of the cells (LeNet's first), in the default config's results folder (its NADs and
    # models are there already: only the summary is made again; the file's name is what is tested)
    (copy / "tiny.yaml").write_text(
        "results: results\nnad_pairs: {architectures: [lenet], indices: [0]}\n"
    )
    base = [SNAKEMAKE, "-s", str(REPO / "Snakefile")]
    tiny = [*base, "--configfile", "tiny.yaml", "--cores", "2"]  # as a user types it, in copy
    assert run_snakemake(tiny, cwd=copy).returncode == 0
    model = "results/nad_pairs/models/lenet/i0_j0_s0.pt"
    data = (copy / model).read_bytes()
    (copy / model).write_bytes(data[:100])
    (copy / "results/nad_pairs/eval/lenet/i0_j0_s0.parquet").unlink()
    res = run_snakemake(tiny, cwd=copy)
    assert res.returncode != 0
    log = (copy / "results/logs/nad_pairs/evaluate/lenet/i0_j0_s0.log").read_text()
    given = re.search(r"Rebuild it with: (\S*snakemake .*)$", log, re.M)[1]
    assert "--configfile tiny.yaml" in given
    command(copy, given)  # typed as given, from where the run was started
    summary = pd.read_parquet(copy / "results/nad_pairs/summary.parquet")
    # tiny's study, not the default one (820f241's command)
    assert set(summary["nad_i"]) == {0} and set(summary["arch"]) == {"lenet"}
    assert (copy / model).read_bytes() == data


def test_configs_in_one_directory_keep_their_own_results(run, tmp_path):
    # b879b52: every config wrote to results/: smoke, default, smoke again recomputed the NADs
    # each time, and the report of one config showed (or missed) the other's files
    workdir, _ = run
    copy = _copy(workdir, tmp_path)
    default = {p: p.read_bytes() for p in (copy / "results").rglob("*") if p.is_file()}
    (copy / "other.yaml").write_text(yaml.safe_dump(  # LeNet's cell alone: fewer jobs
        {"nads": {"n_networks": 24},
         "nad_pairs": {"architectures": ["lenet"], "indices": [0], "train": {"epochs": 2}}}
    ))  # fmt: skip
    other_yaml = str(copy / "other.yaml")
    res = snakemake(copy, "--cores", "2", "--configfile", other_yaml)
    assert (copy / "results-other/nads/lenet.pt").exists()
    other = pd.read_parquet(copy / "results-other/nad_pairs/summary.parquet")
    assert set(other["nad_i"]) == {0} and set(other["epochs"]) == {2}
    # the default config's results untouched, and going back to it: nothing to do
    assert {p: p.read_bytes() for p in (copy / "results").rglob("*") if p.is_file()} == default
    assert planned(copy) == {}
    again = snakemake_here(copy, "-n", "--cores", "1", "--configfile", other_yaml)
    assert "Nothing to be done" in again.stdout + again.stderr
    # the report command that run printed: of its own results
    said = re.search(r"The report \(figures, tables, the config that ran\): (\S*snakemake .*)$",
                     res.stdout + res.stderr, re.M)[1]  # fmt: skip
    assert said == suggested(copy, "--configfile", other_yaml, "--report",
                             "results-other/report.html")  # fmt: skip
    command(copy, said)
    html = (copy / "results-other/report.html").read_text(errors="replace")
    assert "reliance_lenet.png" in html and "lenet: 24 random networks" in html


def test_the_results_folder_is_named_by_the_key_and_stays_in_the_run_directory():
    cfg = {"nad_pairs": {"indices": [0]}}
    loaded = nc.load_config({**cfg, "results": "runs/a"}, SCHEMA)[0]
    assert nc.results_root(loaded, ["/x/smoke.yaml"]) == "runs/a"
    plain = nc.load_config(cfg, SCHEMA)[0]
    assert nc.results_root(plain, []) == "results"
    assert nc.results_root(plain, ["/x/smoke.yaml", "y/mine.yaml"]) == "results-smoke+mine"
    assert Plan(plain, "results-x").final_outputs()[0] == "results-x/nad_pairs/summary.parquet"
    for bad, says in (("/tmp/r", "not a folder inside"), ("../r", "not a folder inside"),
                      (".snakemake/r", "inside .snakemake/")):  # fmt: skip
        with pytest.raises(nc.ConfigError, match=f"^config key 'results': '{bad}' is {says}"):
            nc.load_config({**cfg, "results": bad}, SCHEMA)


DEAD_NETS = """
from torch import nn

def dead_relu(in_channels, num_classes, input_size):
    # every ReLU off for any input near the data: zero gradient, a constant output (as the
    # default study's LeNet cells i500_j100 and i1000_j500 ended at 820f241)
    first = nn.Linear(in_channels * input_size[0] * input_size[1], 32)
    nn.init.constant_(first.bias, -1000.0)
    return nn.Sequential(nn.Flatten(), first, nn.ReLU(), nn.Linear(32, num_classes))
"""


def test_diverged_and_dead_trainings_are_recorded_and_never_read_as_findings(tmp_path):
    (tmp_path / "deadnets.py").write_text(DEAD_NETS)
    cfg = {
        **MICRO,
        "architectures": {**MICRO["architectures"], "dead": {"model": "deadnets:dead_relu"}},
        "nad_pairs": {
            **MICRO["nad_pairs"],
            "architectures": ["mlp", "dead"],
            "train_per_arch": {"mlp": {"lr_max": 1.0e4, "grad_clip": None}},
            # neither outcome needs MICRO's 2000 samples and 10 epochs, nor its measures' sizes
            "n_train": 400,
            "n_test": 200,
            "train": {"epochs": 2},
        },
        "analysis": {
            "n_points": 8,
            "margin_steps": 8,
            "cross_section": {"n_points": 1, "resolution": 5},
            "transitions": {"n_trajectories": 1, "n_points": 8},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(tmp_path, "--cores", "2")
    out = res.stdout + res.stderr
    df = pd.read_parquet(tmp_path / "results/nad_pairs/summary.parquet")
    mlp, dead = df[df.arch == "mlp"], df[df.arch == "dead"]
    assert len(mlp) == 4 * 6 and mlp["diverged"].all() and (mlp["outcome"] == "diverged").all()
    assert mlp["accuracy"].isna().all() and mlp["reliance_deg"].isna().all()
    assert (mlp["diverged_epoch"] >= 1).all()
    assert "4 training(s) of nad_pairs diverged" in out
    # the dead model: its accuracies stand (chance), its measures are NaN with the reason
    # (at 820f241: reliance 0.0 = "relies on channel 1 only", Jacobian norm 0)
    assert (dead["outcome"] == "did not fit").all() and not dead["diverged"].any()
    assert (dead["accuracy"] == 0.5).all()
    measures = ["reliance_deg", "margin_v1", "margin_v2", "jacobian_norm_test",
                "transitions_random", "grad_along_v1"]  # fmt: skip
    assert dead[measures].isna().all().all()
    assert dead["outcome_reason"].str.startswith("training accuracy 0.500, not above").all()
    tail = out.split("Warnings of this run")[1]
    assert "4 model(s) of nad_pairs did not fit their training set" in tail
    assert "dead i0_j1000 s0" in tail
    landing = (tmp_path / "results/report/landing.rst").read_text()
    assert "4 model(s) did not fit" in landing and "dead i0\\_j1000 (seed 0)" in landing
    # in the warnings callout, before the numbers
    callout = landing.split(".. warning::")[1].split("What ran")[0]
    assert "did not fit their training set" in callout and "diverged" in callout
    for fig in ("heatmap", "reliance", "complexity"):  # still drawn, the cells marked
        img = mpimg.imread(tmp_path / f"results/nad_pairs/plots/{fig}_mlp.png")
        red = (img[..., 0] > 0.8) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)
        assert red.sum() > 500, fig
    fig = plots.reliance_heatmaps(df, "dead", str(tmp_path / "r.png"))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("did not\nfit") == 3 * 4  # 4 cells in each of the 3 panels
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "did not fit: training accuracy at guessing (4 models)" in legend
    img = mpimg.imread(tmp_path / "results/nad_pairs/plots/cross_sections_mlp.png")
    assert ((img[..., 0] > 0.8) & (img[..., 1] < 0.3)).sum() > 50  # "diverged" in red
    # as a hard failure: the run stops, and the log names the reason
    cfg["nad_pairs"]["train"] = {**cfg["nad_pairs"]["train"], "fail_on_divergence": True}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(tmp_path, "--cores", "1", check=False)
    assert res.returncode != 0
    train_logs = (tmp_path / "results/logs/nad_pairs/train/mlp").glob("*.log")
    logs = "".join(p.read_text() for p in train_logs)
    assert "TrainingDiverged" in logs and "fail_on_divergence" in logs


def test_the_report_in_a_real_browser(run, tmp_path):
    """Every category, figure and caption of the micro run's report, as headless Chromium
    shows them."""
    from browser.chromium import driver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from nadpipe.studies import REGISTRY

    workdir, _ = run
    snakemake_here(workdir, "--report", "browser.html")
    d = driver(tmp_path)
    try:
        wait = WebDriverWait(d, 20)

        def load():
            d.get(f"file://{workdir / 'browser.html'}")
            wait.until(lambda d: "Headline numbers" in body())

        def click(text):
            path = f"//*[self::span or self::a or self::td][normalize-space(text())='{text}']"
            wait.until(lambda d: d.find_elements(By.XPATH, path))[0].click()

        def body():
            return d.find_element(By.TAG_NAME, "body").text

        load()
        landing = body()
        assert "What ran" in landing and "Headline numbers" in landing
        # the page's top in reach, however long the page (Snakemake centres it in the window)
        top = d.execute_script("return [...document.querySelectorAll('h1')].map("
                               "h => h.getBoundingClientRect().top)")  # fmt: skip
        assert min(top) >= 0, top
        assert "nad_pairs: test accuracy (%)" in landing
        # what the study found, from the results: LeNet follows its NADs
        assert ("lenet (1 seed per cell): the lower NAD index: relied on the channel of the lower "
                "NAD index in 2 of 2 cells with i ≠ j") in landing  # fmt: skip

        def open_result(name, button):
            """The lenet (or "all") row of a nad_pairs subcategory; click its eye (0) or its
            info (1)."""
            load()
            click("nad_pairs")
            click(name)
            rows = wait.until(lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "table tr")
                                         if r.text.startswith(("lenet", "all"))])  # fmt: skip
            rows[0].find_elements(By.TAG_NAME, "a")[button].click()

        captions = {f: REGISTRY["nad_pairs"].figures[f].caption.split("{arch}")[0] for f in FIGURES}
        captions["summary"] = "Test accuracy (%) of every architecture"
        for name, caption_start in captions.items():
            open_result(name, 1)
            start = caption_start.strip()
            wait.until(lambda d, c=start: c in body())
            text = body()
            assert "System Message" not in text and "Docutils" not in text
            if name != "summary":
                open_result(name, 0)
                shown = wait.until(lambda d, n=name: [
                    i for i in d.find_elements(By.TAG_NAME, "img")
                    if f"filename={n}_lenet.png" in (i.get_attribute("src") or "")
                ])  # fmt: skip
                assert shown[0].size["width"] > 100, name
        load()
        click("NADs")
        wait.until(lambda d: "per architecture" in body() and "signatures" in body())
        # the first page leads with a headline figure across the page, readable in a window
        # 1 400 px wide (its text at least as large as drawn: shown no smaller than its
        # pixels), above "What ran"; the other architecture's after the headline numbers
        load()
        shown = [i for i in d.find_elements(By.TAG_NAME, "img")
                 if (i.get_attribute("src") or "").startswith("data:image/png")]  # fmt: skip
        assert len(shown) == 2
        natural = d.execute_script("return arguments[0].naturalWidth", shown[0])
        page = d.execute_script("return arguments[0].parentElement.getBoundingClientRect().width",
                                shown[0])  # fmt: skip
        assert shown[0].size["width"] >= 0.95 * page and page > 850, (shown[0].size, page)
        assert shown[0].size["width"] >= min(natural, page) * 0.95 and natural > 900
        heading = [h for h in d.find_elements(By.TAG_NAME, "h1") if h.text == "What ran"][0]
        assert shown[0].location["y"] < heading.location["y"] < shown[1].location["y"]
        # the warnings (48 networks: NADs not converged) in a callout between them, styled
        (callout,) = d.find_elements(By.CSS_SELECTOR, ".admonition.warning")
        assert shown[0].location["y"] < callout.location["y"] < heading.location["y"]
        assert (
            "NADs of lenet" in callout.text
            and callout.value_of_css_property("border-left-width") == "4px"
        )
        d.save_screenshot(str(tmp_path / "landing.png"))
        # the config shown in place, not downloaded
        click("Configuration")
        rows = wait.until(lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "table tr")
                                     if r.text.startswith("all")])  # fmt: skip
        rows[0].find_elements(By.TAG_NAME, "a")[0].click()
        wait.until(lambda d: d.find_elements(By.TAG_NAME, "iframe")
                   or "n_networks" in body())  # fmt: skip
        frames = d.find_elements(By.TAG_NAME, "iframe")
        if frames:
            d.switch_to.frame(frames[0])
        assert "architectures:" in body() and "n_networks: 48" in body()
    finally:
        d.quit()


@pytest.mark.gpu
@pytest.mark.parametrize("jobs_per_gpu", [1, 4])
def test_the_micro_study_on_a_gpu(run, tmp_path, jobs_per_gpu):
    # on the CPU run's NADs: CUDA's generator draws other networks, whose NADs differ beyond the
    # rank of 48 networks (NAD 1000 is any vector of the null space: LeNet's cells at (1000,
    # 1000) differed by 8 % on an H100 at 1f01ad7); CUDA's NADs of the CPU's networks are
    # test_cli's and test_device's
    from nadpipe.acceptance import TOLERANCE, clearly_learned, compare_summaries, with_nads_of

    workdir, _ = run
    config = with_nads_of({**MICRO, "gpus": {"jobs_per_gpu": jobs_per_gpu}}, workdir / "results")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(tmp_path, "--cores", "8")
    assert f"{jobs_per_gpu} GPU job slot(s) on 1 GPU(s)" in res.stdout + res.stderr
    df = pd.read_parquet(tmp_path / "results/nad_pairs/summary.parquet")
    assert (df["device"] != "cpu").all()
    runs = pd.read_parquet(tmp_path / "results/nad_pairs/runs.parquet")
    assert set(runs["cuda_visible_devices"]) == {"0"}
    # the doctor's comparison: every channel kept, of models that learned clearly on the CPU
    # (a model at the edge of learning is a coin: LeNet on NAD 1000 twice, 9 % apart on the train
    # set on an H100 at a22ca86, where the test compared every row)
    diff, devices, rows = compare_summaries(workdir / "results", tmp_path / "results")
    # at least 6 of the 8 models (7 on the CPU here), 2 splits each
    assert "cpu" not in devices and rows >= 12, (devices, rows)
    assert diff <= TOLERANCE, diff
    # and the finding, which channel each of those models reads, where the channels differ
    cpu = pd.read_parquet(workdir / "results/nad_pairs/summary.parquet")
    clear = pd.DataFrame(sorted(clearly_learned(cpu, "both")), columns=["arch", "variant", "seed"])
    clear = clear[~clear["variant"].isin(cpu.loc[cpu["nad_i"] == cpu["nad_j"], "variant"])]
    key = ["arch", "variant", "seed", "split", "condition"]
    m = cpu.merge(df, on=key, suffixes=("_cpu", "_gpu")).merge(clear)
    assert len(m) == 6 * len(clear) >= 24, len(m)  # 2 splits, 3 conditions
    assert (m["accuracy_cpu"] - m["accuracy_gpu"]).abs().max() <= TOLERANCE, m


def test_a_run_that_fails_before_any_job_does_not_send_the_user_to_a_job_log(tmp_path):
    # a cluster profile whose scheduler cannot be reached: no job ran (0a58d4e: "a job failed
    # (its log is named above)", and none was)
    from nadpipe.runner.lifecycle import end

    results = str(tmp_path / "results")
    logs = tmp_path / "results/logs"
    logs.mkdir(parents=True)
    (logs / "config.log").write_text("")  # a local job that ran, quiet
    since = time.time() - 1
    assert "no job's log holds an error, so Snakemake itself failed" in end(
        False, [], [], since, results
    )
    (logs / "nads.log").write_text("Traceback (most recent call last):\n  ...\nOSError: no\n")
    assert "nadpipe stopped: a job failed (its log is named above)." in end(
        False, [], [], since, results
    )


def test_a_long_jobs_progress_reaches_the_console_at_a_calm_rate(tmp_path):
    # 0a58d4e: the console said "Select jobs to execute..." and nothing more for the 28 minutes
    # a NAD job ran, its progress in its log alone. A line a minute (here a second), from the
    # warm server's job as from one in a process of its own; a short job says nothing there
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"nads": {"n_networks": 64, "networks_per_chunk": 4},
         "nad_pairs": {"architectures": ["lenet"], "indices": [0]}}))  # fmt: skip
    for worker in ("0", "1"):
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        env = {**os.environ, "NADPIPE_PROGRESS_EVERY": "0.5", "NADPIPE_NO_WORKER": worker}
        res = snakemake(tmp_path, "--cores", "2", "results/nads/lenet.pt", env=env)
        lines = re.findall(r"^nadpipe: NADs: (\d+)/64 net .*\(results/logs/nads/lenet.log\)$",
                           res.stderr, re.M)  # fmt: skip
        assert lines and all(0 < int(n) < 64 for n in lines), res.stderr[-2000:]
        # what the job used, measured where it worked: beside its log (Snakemake's own table
        # measures the script that handed the job to the warm server: 0.1 CPU-s)
        used = pd.read_csv(tmp_path / "results/logs/nads/lenet.usage.tsv", sep="\t")
        assert used["cpu_time"].iloc[0] > 1.0 and used["max_rss"].iloc[0] > 100, used
    shutil.rmtree(tmp_path / "results")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"nads": {"n_networks": 24}}))
    res = snakemake(tmp_path, "--cores", "2", "results/nads/lenet.pt")
    assert "nadpipe: NADs:" not in res.stderr  # seconds long: nothing on the console


def test_every_results_folder_side_by_side(run, tmp_path):
    # 0a58d4e: comparing runs meant opening each folder's config.yaml and summary by hand
    workdir, res = run
    shutil.copytree(workdir / "results", tmp_path / "results")
    shutil.copytree(workdir / "results", tmp_path / "results-other")
    config = yaml.safe_load((tmp_path / "results-other/config.yaml").read_text())
    config["nads"]["n_networks"] += 1
    (tmp_path / "results-other/config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "notes").mkdir()  # no results folder: not listed
    out = subprocess.run([sys.executable, "-m", "nadpipe.cli", "runs", str(tmp_path), "--json"],
                         capture_output=True, text=True)  # fmt: skip
    runs = json.loads(out.stdout)
    assert [r["folder"] for r in runs] == ["results", "results-other"]
    n = config["nads"]["n_networks"]
    assert [r["differs"] for r in runs] == [{"nads.n_networks": n - 1}, {"nads.n_networks": n}]
    # what each found: the lines the run ended with
    said = res.stdout + res.stderr
    shown = said.split("What the results show:")[1].split("The report")[0]
    ended = [line.strip()[2:] for line in shown.strip().splitlines()]
    assert runs[0]["findings"] == ended and runs[0]["cells"] > 0
    assert runs[0]["versions"] == [nadpipe.__version__]
    text = subprocess.run([sys.executable, "-m", "nadpipe.cli", "runs", str(tmp_path)],
                          capture_output=True, text=True).stdout  # fmt: skip
    # a row a folder: its studies, architectures, cells, CPU spent and first finding
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("results-other/ "))
    row = lines[at]
    assert " nad_pairs " in row and f" {runs[1]['cells']} " in row and ended[0] in row, text
    # its other findings on the lines below it, in the same column: the run's own words
    below = [line.strip() for line in lines[at + 1 : at + len(ended)]]
    assert below == ended[1:] and lines[at + 1].index(ended[1]) == row.index(ended[0]), text
    assert f"differs: nads.n_networks: results/ {n - 1}, results-other/ {n}" in text
    assert runs[0]["cpu_seconds"] > 0  # what the run's jobs took, from its cost records
    # two of them, cell by cell: one cell's models made to rely on the other channel
    summary = pd.read_parquet(tmp_path / "results-other/nad_pairs/summary.parquet")
    arch, i, j = summary.loc[summary["nad_i"] != summary["nad_j"], ["arch", "nad_i", "nad_j"]].iloc[
        0
    ]
    cell = (summary["arch"] == arch) & (summary["nad_i"] == i) & (summary["nad_j"] == j)
    before = findings.cell_verdicts(summary)
    summary.loc[cell, "reliance_deg"] = 90 - summary.loc[cell, "reliance_deg"]
    summary.to_parquet(tmp_path / "results-other/nad_pairs/summary.parquet")
    after = findings.cell_verdicts(summary)
    out = subprocess.run([sys.executable, "-m", "nadpipe.cli", "diff", str(tmp_path / "results"),
                          str(tmp_path / "results-other"), "--json"], capture_output=True,
                         text=True)  # fmt: skip
    d = json.loads(out.stdout)
    assert d["differs"] == {"nads.n_networks": [n - 1, n]}
    changed = [(c["arch"], c["nad_i"], c["nad_j"]) for c in d["cells"]]
    assert changed == [(arch, i, j)], d["cells"]
    pick = (before["arch"] == arch) & (before["nad_i"] == i) & (before["nad_j"] == j)
    assert d["cells"][0]["verdict"] == [before[pick]["verdict"].iloc[0],
                                        after[pick]["verdict"].iloc[0]]  # fmt: skip
    # said with each side's interval: the seeds' mean angle ± two standard errors
    (ia, ib) = d["cells"][0]["reliance_interval"]
    assert ib[0] == round(after[pick]["reliance_mean"].iloc[0], 1)
    text = subprocess.run([sys.executable, "-m", "nadpipe.cli", "diff", str(tmp_path / "results"),
                           str(tmp_path / "results-other")], capture_output=True,
                          text=True).stdout  # fmt: skip
    said = f"{ia[0]:g} ± {ia[1]:g}°" if ia[1] else f"{ia[0]:g}°"  # one seed: no spread
    assert f"{arch} ({i}, {j}): " in text and f"; reliance {said} -> " in text, text
    # the figure of the change: the one cell framed
    subprocess.run([sys.executable, "-m", "nadpipe.cli", "diff", str(tmp_path / "results"),
                    str(tmp_path / "results-other"), "--figure", str(tmp_path / "change.png")],
                   check=True, capture_output=True)  # fmt: skip
    assert mpimg.imread(tmp_path / "change.png").shape[1] > 800
    # the same as a page when asked (never by a run): both folders, the one compared marked
    subprocess.run([sys.executable, "-m", "nadpipe.cli", "runs", str(tmp_path), "--html",
                    str(tmp_path / "runs.html"), "--against", str(tmp_path / "results")],
                   check=True, capture_output=True)  # fmt: skip
    page = (tmp_path / "runs.html").read_text()
    assert "<b>results/</b> (compared)" in page and "<td>results-other/</td>" in page
    assert f"{arch} ({i}, {j}): {d['cells'][0]['verdict'][0]} -&gt; " in page
    assert page.count('<img src="data:image/png;base64,') == 1


def test_a_runs_report_is_the_same_whatever_folder_lies_beside_it(run, tmp_path):
    # 10c1e0f: the report's job read every results folder beside its own, and a LeNet-only
    # folder there failed a valid MLP run at its last job ("Number of columns must be a
    # positive integer, not 0"); a job reads its declared inputs alone
    workdir, _ = run
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    for copy in (alone, beside):
        shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns(".nadpipe"))
    foreign = beside / "results-lenet"
    shutil.copytree(workdir / "results", foreign)
    summary = pd.read_parquet(foreign / "nad_pairs/summary.parquet")
    summary.loc[:, "arch"] = "lenet_wide"  # no cell in common with the run
    summary.to_parquet(foreign / "nad_pairs/summary.parquet")
    pages = []
    for copy in (alone, beside):
        snakemake(copy, "--cores", "1", "--forcerun", "report_landing", "resolved_config")
        report = copy / "results/report"
        pages.append({p.name: p.read_bytes() for p in sorted(report.iterdir()) if p.is_file()})
    assert pages[0] == pages[1] and "landing.rst" in pages[0]
    # the two folders side by side, when asked: no cell in common, said in words
    out = subprocess.run([sys.executable, "-m", "nadpipe.cli", "diff", str(beside / "results"),
                          str(foreign), "--figure", str(tmp_path / "d.png")],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "nad_pairs: no cell in common (other architectures or NAD indices)" in out.stdout
    assert not (tmp_path / "d.png").exists()
    # a figure path that cannot be one is refused before any work
    out = subprocess.run([sys.executable, "-m", "nadpipe.cli", "diff", str(beside / "results"),
                          str(foreign), "--figure", str(tmp_path / "change.txt")],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode != 0 and "--figure" in out.stderr and ".png: the figure" in out.stderr
    assert not (tmp_path / "change.txt").exists()


def test_a_run_records_what_each_job_cost_and_a_dry_run_prices_from_it(run, tmp_path):
    workdir, _ = run
    rows = [json.loads(line) for line in
            (workdir / "results/.nadpipe/costs.jsonl").read_text().splitlines()]  # fmt: skip
    kinds = {r["kind"] for r in rows}
    assert {"train", "evaluate", "nads", "plot"} <= kinds and all(r["cpu"] > 0 for r in rows)
    trains = [r for r in rows if r["kind"] == "train"]
    epochs, n = MICRO["nad_pairs"]["train"]["epochs"], MICRO["nad_pairs"]["n_train"]
    assert len(trains) == 8 and all(r["units"] == epochs * n for r in trains)  # one seed each
    # the same jobs planned again (-F, in a copy with its records): priced from them, within
    # a few percent of what they cost (medians of the same keys)
    copy = _copy(workdir, tmp_path)
    (copy / "results/.nadpipe").mkdir()
    shutil.copy(workdir / "results/.nadpipe/costs.jsonl", copy / "results/.nadpipe")
    res = snakemake_here(copy, "-n", "-F", "--cores", "2")
    line = re.search(r"^nadpipe: the cost of results/ here: .*; (.*?) of CPU, (.*?) of it "
                     r"start-up \((.*)\)$", res.stdout + res.stderr, re.M)  # fmt: skip
    records = re.search(r"([a-z, ]+): from this machine's earlier runs", line[3])[1].split(", ")
    assert {"evaluate", "nads", "train"} <= set(records), line[0]

    def seconds(said: str) -> float:
        return float(said.split()[0]) * (60 if "min" in said else 1)

    cpu = seconds(line[1]) - seconds(line[2])  # the jobs' own work
    assert 0.7 * sum(r["cpu"] for r in rows) < cpu < 1.3 * sum(r["cpu"] for r in rows), line[0]


def test_warnings_that_say_the_same_of_other_jobs_fold_into_one_line():
    from nadpipe.log import fold

    said = [
        "NADs of lenet: split-half top-10 overlap 0.07 < 0.5: not converged (logs/nads/a.log)",
        "cell i0_j100 s0 did not fit: training accuracy 0.51 (logs/train/x.log)",
        "cell i0_j1000 s2 did not fit: training accuracy 0.50 (logs/train/y.log)",
        "cell i100_j0 s1 did not fit: training accuracy 0.49 (logs/train/z.log)",
        "NADs of mlp: split-half top-10 overlap 0.20 < 0.5: not converged (logs/nads/b.log)",
    ]
    assert fold(said) == [
        said[0],
        f"{said[1]}; and 2 more like it",
        said[4],  # another architecture's: its own line
    ]


def test_runs_side_by_side_differ_only_in_what_each_runs():
    # the keys of a study a folder leaves off set nothing of its run: they differ only among
    # the folders that run it (0.12.0 listed every key of every study, disabled or not)
    from nadpipe.folders import _differ, relevant

    default = relevant({"nads.n_networks": 1100, "nad_pairs.enabled": True,
                        "nad_pairs.indices": [0, 100], "flip.enabled": False, "flip.seeds": [0],
                        "architectures.mlp.model": "mlp"})  # fmt: skip
    smoke = relevant({"nads.n_networks": 40, "nad_pairs.enabled": True, "nad_pairs.indices": [0],
                      "flip.enabled": False, "flip.seeds": [0, 1]})  # fmt: skip
    flip = relevant(
        {
            "nads.n_networks": 1100,
            "nad_pairs.enabled": False,
            "nad_pairs.indices": [0, 100],
            "flip.enabled": True,
            "flip.seeds": [0, 1],
        }
    )
    assert "flip.seeds" not in default and "nad_pairs.indices" not in flip
    assert _differ([default, smoke]) == ["architectures.mlp.model", "nad_pairs.indices",
                                         "nads.n_networks"]  # fmt: skip
    assert _differ([default, flip]) == ["architectures.mlp.model", "flip.enabled",
                                        "nad_pairs.enabled"]  # fmt: skip


SNAPSHOT = Path(__file__).with_name("snapshots") / "micro_summary.csv"
SNAPSHOT_KEYS = ["study", "arch", "variant", "seed", "split", "condition"]


def _snapshot(summary: Path) -> tuple[str, str]:
    """(where it holds, every numeric column per row at 6 significant digits) of a summary."""
    df = pd.read_parquet(summary)
    kinds = pd.api.types
    numeric = [c for c in df.columns if c not in SNAPSHOT_KEYS
               and (kinds.is_numeric_dtype(df[c]) or kinds.is_bool_dtype(df[c]))]  # fmt: skip
    table = df[SNAPSHOT_KEYS + numeric].sort_values(SNAPSHOT_KEYS)
    where = f"# torch {torch.__version__.split('+')[0]} on {platform.machine()}, 1 thread a job"
    return where, table.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def test_the_micro_studys_numbers_change_only_on_purpose(run):
    # 10c1e0f moved seven of nine accuracies of a protocol study by up to 0.92 points with no
    # word: every numeric column of the micro study's summary, per cell, is held here. To
    # change it on purpose: NADPIPE_SNAPSHOT=update .venv/bin/python -m pytest
    # tests/test_workflow.py -k numbers_change, and commit it with a CHANGELOG line saying why
    workdir, _ = run
    where, now = _snapshot(workdir / "results/nad_pairs/summary.parquet")
    if os.environ.get("NADPIPE_SNAPSHOT") == "update":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(f"{where}\n{now}")
        pytest.skip(f"wrote {SNAPSHOT}")
    saved_where, saved = SNAPSHOT.read_text().split("\n", 1)
    if saved_where != where:  # float training differs across torch builds and processors
        pytest.skip(f"the snapshot holds for {saved_where[2:]}; this is {where[2:]}")
    changed = [f"- {a}\n+ {b}" for a, b in zip(saved.splitlines(), now.splitlines(), strict=True)
               if a != b]  # fmt: skip
    assert saved == now, "the micro study's numbers moved:\n" + "\n".join(changed[:5])
    git = ["git", "-C", str(REPO)]
    last = subprocess.run([*git, "log", "-1", "--format=%H", "--", str(SNAPSHOT)],
                          capture_output=True, text=True)  # fmt: skip
    if last.returncode == 0 and last.stdout.strip():  # a checkout with its history
        show = [*git, "show", "--name-only", "--format=", last.stdout.strip()]
        touched = subprocess.run(show, capture_output=True, text=True, check=True).stdout.split()
        assert "CHANGELOG.md" in touched, "the snapshot changed without a CHANGELOG line"
