"""Two studies in one checkout: the run lock covers a results folder, not the directory, and
everything a run writes (results, logs, benchmarks, its lock) lies in its own folder. Real runs,
the first frozen while it holds its lock (no sleep decides the test)."""

import re
import signal
import subprocess
import time

import pandas as pd
import yaml
from conftest import REPO
from helpers import SNAKEMAKE, TINY, run_snakemake, snakemake_here

from nadpipe.paths import RUN_LOCK, at
from nadpipe.runner.lifecycle import holder


def snakemake_command(workdir, *args: str) -> list[str]:
    return [SNAKEMAKE, "-s", str(REPO / "Snakefile"), *args]


def snakemake(workdir, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Snakemake as a user types it in `workdir` (config files relative to it)."""
    res = run_snakemake(snakemake_command(workdir, *args), cwd=workdir)
    if check:
        assert res.returncode == 0, (args, res.stdout[-3000:], res.stderr[-3000:])
    return res


def _frozen_once_locked(workdir, first: subprocess.Popen, results: str) -> None:
    lock = workdir / at(RUN_LOCK, results)
    deadline = time.time() + 180
    while time.time() < deadline and first.poll() is None:
        first.send_signal(signal.SIGSTOP)
        # held, and its holder written (take_lock writes it just after it locks: a run frozen
        # in between would be named "a process"; seen once under a loaded suite)
        if f"snakemake pid {first.pid}," in (holder(str(lock))[0] or ""):
            return
        first.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the first run never held {lock} (exit {first.poll()})")


def test_two_configs_run_at_once_each_with_its_own_logs(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**TINY, "nads": {"n_networks": 26}}))
    cmd = snakemake_command(tmp_path, "--cores", "1")
    first = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)  # fmt: skip
    _frozen_once_locked(tmp_path, first, "results")
    try:
        # another config's dry run, real run and report go on beside it
        assert (
            "nads"
            in snakemake_here(tmp_path, "-n", "--cores", "1", "--configfile", "b.yaml").stdout
        )
        second = snakemake(tmp_path, "--cores", "1", "--configfile", "b.yaml")
        assert "results-b/nad_pairs/summary.parquet" in second.stdout + second.stderr
        snakemake_here(tmp_path, "--configfile", "b.yaml", "--report", "results-b/report.html")
        assert (tmp_path / "results-b/report.html").stat().st_size > 100_000
        # a command of the frozen run's own folder is refused, in words that are true
        same = snakemake(tmp_path, "-n", "--cores", "1", check=False)
        out = same.stdout + same.stderr
        assert same.returncode != 0 and "Traceback" not in out, out
        assert (
            f"jobs that write results/, this command's results folder (snakemake pid "
            f"{first.pid}" in out
        )
        assert "A config with another results folder (the key `results`) runs beside it" in out
    finally:
        first.send_signal(signal.SIGCONT)
    said, _ = first.communicate(timeout=300)
    assert first.returncode == 0, said[-3000:]
    # each run's logs and what its jobs used in its own folder; its warnings its own
    for results, n in (("results", 24), ("results-b", 26)):
        log = (tmp_path / results / "logs/nads/mlp.log").read_text()
        assert f"n_networks={n}," in log and f"n_networks={50 - n}," not in log
        assert (tmp_path / results / "logs/nads/mlp.usage.tsv").exists()
        summary = pd.read_parquet(tmp_path / results / "nad_pairs/summary.parquet")
        assert len(summary) > 0 and summary["accuracy"].between(0, 1).all()
    assert not (tmp_path / "logs").exists() and not (tmp_path / "benchmarks").exists()
    assert not (tmp_path / ".nadpipe/run.lock").exists()
    # an up-to-date run lists the warnings of its own folder, none of the other's
    b_warned = "raise nads.n_networks (now 26)"
    up = snakemake(tmp_path, "--cores", "1")
    assert "nothing to do" in up.stderr and b_warned not in up.stdout + up.stderr
    assert "raise nads.n_networks (now 24)" in up.stderr


def test_config_files_of_the_same_name_never_share_a_folder_unless_they_say_so(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.yaml").write_text(yaml.safe_dump(TINY))
    snakemake(tmp_path, "--cores", "1", "--configfile", "a/x.yaml", "--until", "nads")
    res = snakemake(tmp_path, "-n", "--cores", "1", "--configfile", "b/x.yaml", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out
    owner = str((tmp_path / "a/x.yaml").resolve())
    assert f"results-x/ holds the results of {owner}" in out
    assert "`--config results=results-x-2`" in out
    # what it says: a folder of its own
    moved = snakemake_here(tmp_path, "-n", "--cores", "1", "--configfile", "b/x.yaml",
                         "--config", "results=results-x-2")  # fmt: skip
    assert "results-x-2/nads/mlp.pt" in moved.stdout
    # the first config's own runs go on
    snakemake_here(tmp_path, "-n", "--cores", "1", "--configfile", "a/x.yaml")  # exit 0
    # the other way it gives, for the same config moved: delete the record and run again
    record = re.search(r"if it is the same config moved, delete (\S+) and run again", out)[1]
    (tmp_path / record).unlink()
    snakemake_here(tmp_path, "-n", "--cores", "1", "--configfile", "b/x.yaml")  # exit 0
    # a config that names the folder itself may share it (it says so)
    (tmp_path / "b/x.yaml").write_text(yaml.safe_dump({**TINY, "results": "results-x"}))
    snakemake_here(tmp_path, "-n", "--cores", "1", "--configfile", "b/x.yaml")  # exit 0
