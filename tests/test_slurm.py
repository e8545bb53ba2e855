"""The SLURM profile on a real Slurm: a single-node cluster on loopback started by
tests/slurm/local_slurm.sh (which installs Debian's slurm-wlm and munge when missing), and the
smoke config run through `--profile profiles/slurm`. A machine that cannot run Slurm fails this
test with the reason; it is never skipped."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from helpers import snakemake_command
from system_packages import wait_for_background_install

SCRIPT = REPO / "tests" / "slurm" / "local_slurm.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    wait_for_background_install()  # the session's, started when it began (a bare machine)
    res = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=900
    )
    try:
        if res.returncode != 0:
            pytest.fail(
                "cannot start a local Slurm on this machine, so the SLURM profile is untested:\n"
                f"{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
            )
        yield state
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)


def test_smoke_config_runs_big_jobs_alone_and_small_ones_together(cluster, tmp_path):
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    # the cluster's GPU is fake: a job given it would stop (it finds no CUDA) unless the config
    # says to compute on the CPU; the NADs in 3 shards (16, 16 and 8 networks), 4 cells
    (tmp_path / "cpu.yaml").write_text(
        "gpus: {device: cpu}\n"
        "nads: {networks_per_chunk: 8, networks_per_shard: 16}\n"
        "nad_pairs: {indices: [0, 1]}\n"
    )
    timeout = ["timeout", "-k", "10", "720"]  # Snakemake ignores SIGTERM: -k kills it
    cmd = timeout + snakemake_command(
        tmp_path,
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--configfile",
        str(REPO / "configs" / "smoke.yaml"),
        str(tmp_path / "cpu.yaml"),
        # a 2-CPU node: two single-CPU jobs at a time (the evaluations' resources as the profile
        # sets them: a command line's --set-resources replaces the profile's); first status
        # check after 1 s (the plugin then adds 10 s per check that finds no job finished)
        "--set-resources",
        "nads:cpus_per_task=1",
        "nad_shard:cpus_per_task=1",
        "train:cpus_per_task=1",
        "evaluate:mem_mb=16000",
        "evaluate:runtime=2",
        "--slurm-init-seconds-before-status-checks",
        "1",
    )
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"rc {res.returncode}:\n{out[-6000:]}"
    # every job of the plan but the local rules (the target `all`, the report's small text
    # files, the empty ahead files of cells trained alone) ran as a SLURM job: the NAD shards,
    # the merge and the trainings each alone, the 4 evaluations in one submission, the summary
    # and every figure in one (profiles/slurm: groups), 10 submissions where 19 jobs ran
    stats = out.split("Job stats:")[1].split("total")[0]
    planned = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}
    local = ("all", "resolved_config", "report_landing", "report_summary", "trains_alone")
    assert sum(planned.values()) - sum(planned[r] for r in local) == 19
    assert (planned["nad_shard"], planned["train"], planned["evaluate"]) == (3, 4, 4)
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", out)
    assert len(submitted) == 3 + 1 + 4 + 1 + 1, out[-3000:]
    assert len(set(submitted)) == len(submitted)
    groups = re.findall(r"^\[.*\] Group job (\w+) ", out, re.M)
    assert sorted(groups) == ["evaluations", "figures"], groups
    grouped = out.split("Group job evaluations")[1].split("has been submitted")[0]
    assert grouped.count("rule evaluate:") == 4, grouped
    print(f"SLURM job ids: {' '.join(submitted)}")  # shown with pytest -s
    # the results are right, and each training knows its SLURM job, host and GPU
    df = pd.read_parquet(tmp_path / "results-smoke+cpu/nad_pairs/summary.parquet")
    assert len(df) == 4 * 2 * 3 and df["accuracy"].between(0, 1).all()
    test = df[(df["split"] == "test") & (df["variant"] == "i0_j0")]
    test = test.set_index("condition")["accuracy"]
    assert test["both"] > 0.85 and test["ch1_only"] > 0.85  # LeNet learns NAD 0
    runs = pd.read_parquet(tmp_path / "results-smoke+cpu/nad_pairs/runs.parquet")
    assert len(runs) == 4 and set(runs["slurm_job_id"]) <= set(submitted)
    # the NADs merged from the shards the SLURM jobs computed: all 40 networks
    nads = json.loads((tmp_path / "results-smoke+cpu/nads/lenet.json").read_text())
    assert nads["networks"] == 40 and nads["settings"]["n_networks"] == 40
    # gpus.device: cpu asks SLURM for no GPU (b879b52: --gpus=1 for every job, given GPU "0")
    assert runs["cuda_visible_devices"].isna().all()
    assert (runs["host"] != "").all()
    assert (
        Path(tmp_path / "results-smoke+cpu/nad_pairs/plots/heatmap_lenet.png").stat().st_size
        > 10_000
    )
