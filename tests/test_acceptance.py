"""`nadpipe doctor --gpu` (nadpipe.acceptance): on a machine without CUDA it says what it would
run and fails; the parts that need no GPU are checked here (the micro study's plan asks SLURM
and the slot pool for no GPU under gpus.device cpu; the summary comparison)."""

import re
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO
from helpers import snakemake_here

from nadpipe import acceptance
from nadpipe.cifar import write_cifar10_like


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check runs in full")
def test_doctor_gpu_without_cuda_says_what_it_would_run_and_exits_non_zero():
    res = subprocess.run([sys.executable, "-m", "nadpipe.cli", "doctor", "--gpu"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert "no GPU here" in res.stdout and "finds no usable GPU" in res.stdout
    steps = re.findall(r"^  \d\. ([\w-]+):", res.stdout, re.M)
    assert steps == [name for name, _ in acceptance.STEPS] and len(steps) == 8


def _jobs(tmp_path, gpus: dict) -> list[dict]:
    """Each job of a dry run of the micro study with this `gpus` block: its rule, inputs,
    outputs and gpu resource."""
    write_cifar10_like(str(tmp_path / "cifar"), n_train=96, n_test=48, seed=2)
    cfg = acceptance.micro_config(str(tmp_path / "cifar")) | {"gpus": gpus}
    (tmp_path / "micro.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake_here(tmp_path, "-n", "--configfile", str(tmp_path / "micro.yaml"))
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out.stdout + out.stderr):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule:
            field = {k: (re.search(rf"^\s+{k}: (.*)$", block, re.M) or ["", ""])[1]
                     for k in ("input", "output", "resources")}  # fmt: skip
            gpu = re.search(r"\bgpu=(\d+)", field["resources"])
            jobs.append({"rule": rule[1], "input": field["input"], "output": field["output"],
                         "gpu": int(gpu[1]) if gpu else None})  # fmt: skip
    return jobs


def _dry_run(tmp_path, device: str) -> dict[str, set[int]]:
    """gpu resource of each rule in a dry run of the micro study with gpus.device `device`."""
    found: dict[str, set[int]] = {}
    for job in _jobs(tmp_path, {"device": device}):
        if job["gpu"] is not None:
            found.setdefault(job["rule"], set()).add(job["gpu"])
    return found


def test_a_cpu_run_asks_no_job_for_a_gpu(tmp_path):
    # b879b52: gpu=1 on every compute rule, so SLURM asked --gpus=1 for every NAD, training and
    # evaluation job even under gpus.device: cpu
    cpu = _dry_run(tmp_path / "cpu", "cpu")
    assert {"nads", "train", "evaluate"} <= set(cpu) and set().union(*cpu.values()) == {0}, cpu
    auto = _dry_run(tmp_path / "auto", "auto")
    assert auto["nads"] == auto["train"] == auto["evaluate"] == {1}, auto


def test_the_summary_comparison_reads_only_rows_that_can_be_equal(tmp_path):
    # 400 test images; the both-channels rows of a model that learned, then one at chance and
    # the single-channel rows of a (0, 0) cell (which channel it reads is a coin)
    rows = pd.DataFrame({
        "arch": ["lenet"] * 4 + ["mlp"] * 2, "variant": ["i0_j0"] * 6, "seed": [0] * 6,
        "split": ["test", "train", "test", "test", "test", "train"],
        "condition": ["both", "both", "ch1_only", "ch2_only", "both", "both"],
        "accuracy": [0.9, 1.0, 0.9, 0.5, 0.5, 0.52], "n_test": [400] * 6,
        "outcome": ["fit"] * 4 + ["did not fit"] * 2, "device": ["cpu"] * 6,
    })  # fmt: skip

    def compare(gpu_accuracy):
        for name, df in (("cpu", rows), ("gpu", rows.assign(accuracy=gpu_accuracy,
                                                           device="H100"))):  # fmt: skip
            (tmp_path / name / "nad_pairs").mkdir(parents=True, exist_ok=True)
            df.to_parquet(tmp_path / name / "nad_pairs" / "summary.parquet")
        return acceptance.compare_summaries(tmp_path / "cpu", tmp_path / "gpu")

    # the coin and the model at chance move as they like: 2 rows compared, 1 % apart
    diff, devices, compared = compare([0.91, 1.0, 0.5, 0.9, 0.95, 0.5])
    assert diff == pytest.approx(0.01) and devices == {"H100"} and compared == 2
    # exactly the tolerance, 20 of 400 images, whose float difference 0.9 - 0.85 lies above
    # 0.05 (0.050000000000000044): counted in images, it passes, as the doctor checks
    diff, _, _ = compare([0.85, 1.0, 0.9, 0.5, 0.5, 0.52])
    assert diff <= acceptance.TOLERANCE and diff == pytest.approx(acceptance.TOLERANCE)
    diff, _, _ = compare([0.8, 1.0, 0.9, 0.5, 0.5, 0.52])  # a learned cell 40 images off
    assert diff == pytest.approx(0.1) and diff > acceptance.TOLERANCE
    # a model that fit its training set and guesses on the test set is no measure either
    rows.loc[rows["arch"] == "mlp", "outcome"] = "fit"
    assert compare([0.91, 1.0, 0.5, 0.9, 0.95, 0.5])[2] == 2
    # nor one at the edge of learning (a coin, like LeNet on NAD 1000 twice on an H100): its
    # test accuracy above chance (0.6 > 0.575, three standard errors on 400) but not clearly
    rows.loc[rows["arch"] == "mlp", "accuracy"] = [0.6, 0.75]
    assert compare([0.91, 1.0, 0.5, 0.9, 0.5, 0.9])[2] == 2
    rows.loc[:, "outcome"] = "did not fit"  # nothing learned: agreeing proves nothing
    with pytest.raises(RuntimeError, match="no model of .* learned"):
        compare(rows["accuracy"].tolist())
    rows.iloc[:1].to_parquet(tmp_path / "gpu" / "nad_pairs" / "summary.parquet")
    with pytest.raises(RuntimeError, match="other rows"):
        acceptance.compare_summaries(tmp_path / "cpu", tmp_path / "gpu")


def test_a_batch_of_cells_asks_for_one_gpu_and_its_cells_claim_without_one(tmp_path):
    # b879b52: every cell of a batch a GPU job (under SLURM, up to 63 idle --gpus=1 jobs per
    # batch); now a batch is one job that asks for a GPU, its cells' own jobs ask for none and
    # read its result through their ahead files (tests/test_batch_runs.py: the same in real runs)
    jobs = _jobs(tmp_path, {"device": "auto", "batch_cells": 2})
    batches = [j for j in jobs if j["rule"].startswith("train_together_")]
    assert batches and all(j["gpu"] == 1 for j in batches), jobs
    ahead = {a for j in batches for a in j["output"].split(", ")}
    claims = [j for j in jobs if j["rule"] == "train" and set(j["input"].split(", ")) & ahead]
    assert len(claims) == len(ahead) and all(j["gpu"] == 0 for j in claims), claims
    alone = [j for j in jobs if j["rule"] == "train" and j not in claims]
    assert all(j["gpu"] == 1 for j in alone), alone


def test_the_gpu_steps_compare_like_with_like_under_another_draw_of_networks(tmp_path):
    # what a GPU does differently, emulated on the CPU: another draw of NAD networks (nads.seed
    # 1 for 0; b879b52's doctor compared rows that rest on the draw, 4 images apart here). Its
    # GPU steps read the CPU run's NADs: rows then agree within the tolerance, and they do
    # in the study whose models learn at the doctor's sizes, the NAD pairs (the rows of
    # studies without NADs cannot move with the draw; the single-direction cell fits its
    # training set and guesses on its test set, and the CIFAR-like cells, synthetic images,
    # learn nothing: the doctor compares none of their rows)
    from nadpipe.studies import REGISTRY

    used = {"nad_pairs"}
    only = {name: {"enabled": False} for name in REGISTRY if name not in used}
    change = {**acceptance.learning_sizes(), **only}
    # the summaries the doctor compares and the config they were made under, not the figures:
    # the other tests' runs draw the same ones, and here they were half of the jobs' CPU
    made = ("results-micro/nad_pairs/summary.parquet", "results-micro/config.yaml")
    _, cpu = acceptance._snakemake(REPO, tmp_path / "cpu", "cpu", *made, change=change)
    # and trained in bf16 (CPU autocast), as a GPU trains by default (train.precision auto)
    again = {**change, "nads": {"seed": 1}}
    again["nad_pairs"] = {**again["nad_pairs"], "train": {**again["nad_pairs"]["train"],
                                                          "precision": "bf16"}}  # fmt: skip
    _, other = acceptance._snakemake(REPO, tmp_path / "other", "cpu", *made, nads_of=cpu,
                                     change=again)  # fmt: skip
    took = pd.read_parquet(other / "nad_pairs" / "summary.parquet")["bf16"]
    assert took.all() and not pd.read_parquet(cpu / "nad_pairs/summary.parquet")["bf16"].any()
    assert {p.parent.name for p in other.glob("*/summary.parquet")} == used
    config = yaml.safe_load((other / "config.yaml").read_text())
    assert config["architectures"]["lenet"]["nads_file"] == str((cpu / "nads/lenet.npy").resolve())
    diff, devices, compared = acceptance.compare_summaries(cpu, other)
    assert diff <= acceptance.TOLERANCE and devices == {"cpu"}
    # ... over models that learned at the doctor's sizes (at the micro study's own, none did)
    pairs = pd.read_parquet(cpu / "nad_pairs" / "summary.parquet")
    assert set(pairs["outcome"]) == {"fit"} and (pairs["n_test"] == 400).all()
    assert compared >= 2 * len(pairs.drop_duplicates(["arch", "variant", "seed"]))


def test_the_doctors_resume_step_runs_here_on_the_cpu(tmp_path):
    # the GPU doctor's resume step hands its trainings the device through the run's variable:
    # 0.12.0's first version imported a name that no longer existed, and only a GPU ran it
    said = acceptance._resume(tmp_path, batched=False, device="cpu", n_train=64)
    assert said == "bit-identical weights, trained_together 1, on cpu"
