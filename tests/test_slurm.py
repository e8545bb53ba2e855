"""The SLURM profile on a real Slurm: a single-node cluster on loopback started by
tests/slurm/local_slurm.sh (which installs Debian's slurm-wlm and munge when missing), and the
smoke config run through `--profile profiles/slurm` (tests/slurm_smoke.py: the session starts it
in the background, as it waits more than it computes). A machine that cannot run Slurm fails
this test with the reason; it is never skipped."""

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import slurm_smoke


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run's (result, working directory): the session's, or one started here."""
    folder = os.environ.get(slurm_smoke.ENV)
    if folder is None:  # a session that filtered its tests did not start it
        folder = tmp_path_factory.mktemp("slurm-smoke")
        proc = slurm_smoke.start(folder)
        try:
            result = slurm_smoke.wait(Path(folder))
        finally:
            slurm_smoke.stop(proc, Path(folder))
    else:
        result = slurm_smoke.wait(Path(folder))
    if not result["started"]:
        pytest.fail(
            "cannot start a local Slurm on this machine, so the SLURM profile is untested:\n"
            f"{result['output'][-6000:]}"
        )
    return result, Path(folder) / "work"


def test_smoke_config_runs_big_jobs_alone_and_small_ones_together(smoke):
    result, tmp_path = smoke
    out = result["output"]
    assert result["rc"] == 0, f"rc {result['rc']}:\n{out[-6000:]}"
    # every job of the plan but the local rules (the target `all`, the report's small text
    # files, nad_code) ran as a SLURM job: the NAD shards, the merge, the batch's training and
    # each cell's claim alone, the 2 evaluations in one submission, the summary and every
    # figure in one (profiles/slurm: groups), 8 submissions where 15 jobs ran
    stats = out.split("Job stats:")[1].split("total")[0]
    planned = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}
    local = ("all", "resolved_config", "report_landing", "report_summary", "nad_code")
    assert sum(planned.values()) - sum(planned[r] for r in local) == 15, planned
    together = [r for r in planned if r.startswith("train_together_")]
    assert (planned["nad_shard"], planned["train"], planned["evaluate"]) == (2, 2, 2)
    assert [planned[r] for r in together] == [1], planned
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", out)
    assert len(submitted) == 2 + 1 + 1 + 2 + 1 + 1, out[-3000:]
    assert len(set(submitted)) == len(submitted)
    groups = re.findall(r"^\[.*\] Group job (\w+) ", out, re.M)
    assert sorted(groups) == ["evaluations", "figures"], groups
    grouped = out.split("Group job evaluations")[1].split("has been submitted")[0]
    assert grouped.count("rule evaluate:") == 2, grouped
    print(f"SLURM job ids: {' '.join(submitted)}")  # shown with pytest -s
    # the results are right, and each training knows its SLURM job, host and GPU
    df = pd.read_parquet(tmp_path / "results-smoke+gpu/nad_pairs/summary.parquet")
    assert len(df) == 2 * 2 * 3 and df["accuracy"].between(0, 1).all()
    test = df[(df["split"] == "test") & (df["variant"] == "i0_j0")]
    test = test.groupby("condition")["accuracy"].min()  # the worse of the two seeds
    assert test["both"] > 0.85 and test["ch1_only"] > 0.85  # LeNet learns NAD 0
    runs = pd.read_parquet(tmp_path / "results-smoke+gpu/nad_pairs/runs.parquet")
    assert len(runs) == 2 and set(runs["slurm_job_id"]) <= set(submitted)
    # the NADs merged from the shards the SLURM jobs computed: all 40 networks
    nads = json.loads((tmp_path / "results-smoke+gpu/nads/lenet.json").read_text())
    assert nads["networks"] == 40 and nads["settings"]["n_networks"] == 40
    # what SLURM gave each job, as its task prolog read it (`scontrol show job` and the
    # CUDA_VISIBLE_DEVICES SLURM set): the GPU to the shards, the batch's one training and the
    # evaluations; none to the merge, the figures and the cells' own jobs, which claim what the
    # batch trained (issue 43: a batch's cells asked for a GPU each when they ran, where a dry
    # run showed gpu=0)
    given = {}
    for line in result["given"].splitlines():  # a line per task: the batch step and srun's
        fields = dict(f.split("=", 1) for f in line.split())
        given[fields["JobId"]] = fields
    assert set(submitted) == set(given), (submitted, result["given"])
    gpus = {}  # per rule: (the GPUs held, CUDA_VISIBLE_DEVICES) of its jobs
    for job in (given[j] for j in submitted):
        held = job.get("TresPerJob", job.get("TresPerNode", "none"))
        rule = job["Comment"].split("_wildcards")[0]
        gpus.setdefault(rule, set()).add((held, job["CUDA_VISIBLE_DEVICES"]))
    gpu, none = {("gres:gpu:1", "0")}, {("none", "none")}
    assert gpus == {
        "rule_nad_shard": gpu, "rule_nads": none, f"rule_{together[0]}": gpu,
        "rule_train": none, "rule_evaluations_evaluate": gpu,
        "rule_figures_aggregate_plot_plot_nads_signatures": none,
    }, gpus  # fmt: skip
    assert runs["cuda_visible_devices"].isna().all()  # the prolog hid the fake GPU
    assert (runs["host"] != "").all()
    assert (
        Path(tmp_path / "results-smoke+gpu/nad_pairs/plots/heatmap_lenet.png").stat().st_size
        > 10_000
    )
