"""The lowest Snakemake pyproject.toml declares runs the workflow: the micro study (one cell of
every study) for real, the report command the run prints, and a second run that finds nothing to
do. The floor lies under .venv/snakemake-floor (tests/as_installed.py puts it there, as the
README's test command runs it), put first on the path of Snakemake and of every job."""

import os
import re
import shlex
import subprocess
import sys

import pandas as pd
import yaml
from as_installed import FLOOR_DIR, floor
from conftest import REPO
from test_lint import PLANNED, PROBE

from nadpipe.acceptance import micro_config
from nadpipe.cifar import write_cifar10_like


def test_the_micro_study_runs_at_the_declared_snakemake_floor(tmp_path):
    assert (FLOOR_DIR / "VERSION").exists(), (
        f"no Snakemake {floor()} under {FLOOR_DIR}: run `.venv/bin/python tests/as_installed.py` "
        "first (the README's test command does)"
    )
    env = {**os.environ, "PYTHONPATH": str(FLOOR_DIR)}
    version = subprocess.run([sys.executable, "-m", "snakemake", "--version"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert version.split(".")[:2] == floor().split(".")[:2] and version != "", version
    assert min_version() == floor()  # the Snakefile's own floor is the declared one
    # what nadpipe reads of Snakemake's internals (nadpipe.runner.surface), at the floor
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "Snakefile").write_text(PROBE)
    probe = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"],
                           cwd=tmp_path / "probe", env=env, capture_output=True,
                           text=True)  # fmt: skip
    assert "nadpipe.runner.surface lacks: []" in probe.stdout + probe.stderr, probe.stderr[-2000:]
    assert PLANNED in probe.stdout, probe.stdout[-2000:]

    write_cifar10_like(str(tmp_path / "cifar"), n_train=96, n_test=48, seed=2)
    (tmp_path / "micro.yaml").write_text(yaml.safe_dump(micro_config("cifar")))
    snakemake = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]

    def run(*args: str) -> str:
        # a command as typed, with the floor's Snakemake (on PYTHONPATH)
        res = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert res.returncode == 0, (args, res.stdout[-3000:], res.stderr[-3000:])
        return res.stdout + res.stderr

    out = run(*snakemake, "--cores", "2", "--configfile", "micro.yaml")
    results = tmp_path / "results-micro"
    for study in ("nad_pairs", "single_direction", "fourier", "cifar_nad", "poison", "flip"):
        summary = pd.read_parquet(results / study / "summary.parquet")
        assert len(summary) > 0 and summary["accuracy"].between(0, 1).all(), study
    command = re.search(r"^The report \(.*?\): (\S*python\S* -m snakemake .*)$", out, re.M)[1]
    assert command.endswith("--configfile micro.yaml --report results-micro/report.html")
    run(*shlex.split(command))  # exactly as printed
    assert (results / "report.html").stat().st_size > 100_000
    again = run(*snakemake, "--cores", "2", "--configfile", "micro.yaml")
    assert "nadpipe: nothing to do, every result is up to date" in again
    assert "results-micro/nad_pairs/summary.parquet" in again.split("nothing to do")[1]
    # said in Snakemake's log file too (found through the logging module, at any version)
    logs = sorted((tmp_path / ".snakemake" / "log").glob("*.snakemake.log"))
    assert logs and "nadpipe: nothing to do" in logs[-1].read_text()


def min_version() -> str:
    return re.search(r'min_version\("([\d.]+)"\)', (REPO / "Snakefile").read_text())[1]


def test_changed_settings_and_nads_until_converged_rerun_right_at_the_floor(tmp_path):
    # below the floor, 9.0.0 to 9.1.0 rerun nothing when params change, and 9.0.0 to 9.1.4 run
    # the merge after a second round of checkpoints without planning the next (measured)
    env = {**os.environ, "PYTHONPATH": str(FLOOR_DIR)}
    nads = {"n_networks": 64, "networks_per_chunk": 8, "networks_per_shard": 16,
            "until_converged": True, "min_overlap_top10": 0.99}  # fmt: skip
    # the MLP: its networks cost a tenth of LeNet's, and its NADs never converge at 0.99
    mlp = {"model": "mlp", "kwargs": {"hidden": [64]}}
    config = {"architectures": {"mlp": mlp}, "nads": nads,
              "nad_pairs": {"architectures": ["mlp"], "indices": [0], "seeds": [0]}}  # fmt: skip

    def run(*args: str) -> str:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        res = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
                              *args, "results/nads/mlp.pt"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)  # fmt: skip
        assert res.returncode == 0, (args, res.stdout[-3000:], res.stderr[-3000:])
        return res.stdout + res.stderr

    run("--cores", "2")  # rounds of 32 and 64 networks: the ceiling, not converged
    summary = yaml.safe_load((tmp_path / "results/nads/mlp.json").read_text())
    assert summary["networks"] == 64 and [r["networks"] for r in summary["rounds"]] == [32, 64]
    assert "Nothing to be done" in run("-n")
    config["nads"]["n_networks"] = 128  # a changed setting: the next round is planned
    assert re.search(r"^nad_round\s+1$", run("-n"), re.M)
    run("--cores", "2")
    summary = yaml.safe_load((tmp_path / "results/nads/mlp.json").read_text())
    assert [r["networks"] for r in summary["rounds"]] == [32, 64, 128]
