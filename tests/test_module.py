"""nadpipe as a module of another workflow (docs/module.md), run for real: the page's module
lines in a workflow of one's own, and a workflow snakedeploy wrote from a copy of this checkout;
each gives the summary of a plain run of the same config, cells trained together included."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO
from helpers import SNAKEMAKE, TINY, jobs_run, snakemake

# two seeds trained two at a time: the batch rule, which the module renames, runs too
STUDY = {**TINY, "results": "out/nadpipe", "gpus": {"batch_cells": 2},
         "nad_pairs": {**TINY["nad_pairs"], "seeds": [0, 1]}}  # fmt: skip
SUMMARY = "out/nadpipe/nad_pairs/summary.parquet"


def _numbers(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    return df.select_dtypes("number").reset_index(drop=True)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> pd.DataFrame:
    here = tmp_path_factory.mktemp("plain")
    (here / "config.yaml").write_text(yaml.safe_dump(STUDY))
    snakemake(here, "--cores", "2")
    return _numbers(here / SUMMARY)


def _run(where: Path, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=where, capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def test_the_pages_module_lines_run_a_study_as_a_plain_run_does(plain, tmp_path):
    # 10c1e0f: 180 jobs planned, then "results/.nadpipe/batches.json does not exist" at the
    # first training (a module's workflow never runs nadpipe's onstart)
    page = (REPO / "docs/module.md").read_text()
    lines = re.search(r"```python\n(.*?)```", page, re.S)[1]
    lines = lines.replace("/path/to/nadpipe", str(REPO))
    (tmp_path / "Snakefile").write_text(lines)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))  # no config.yaml here
    res = _run(tmp_path)
    rules = [rule for rule, _, _ in jobs_run(res.stdout + res.stderr)]
    assert "nadpipe_train_together_1" in rules and rules.count("nadpipe_train") == 2, rules
    assert "localrules directive specifies rules that are not present" not in res.stderr
    pd.testing.assert_frame_equal(_numbers(tmp_path / SUMMARY), plain)
    # the dry run after it: nothing to do; the NADs forced, priced by nadpipe's own names
    res = _run(tmp_path, "-n")
    assert "Nothing to be done" in res.stdout + res.stderr
    res = _run(tmp_path, "-n", "--forcerun", "nadpipe_nads")
    line = re.search(r"^nadpipe: the cost of out/nadpipe/ here: .*$", res.stdout + res.stderr,
                     re.M)[0]  # fmt: skip
    assert "nads 1" in line and "train 2" in line and "evaluate 2" in line, line


def test_a_workflow_snakedeploy_writes_runs_once_its_module_points_at_the_checkout(plain, tmp_path):
    source, dest = tmp_path / "nadpipe", tmp_path / "my-study"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for f in files:  # the checkout as a clone of it holds it
        if (REPO / f).exists() or (REPO / f).is_symlink():
            (source / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, source / f, follow_symlinks=False)
    deploy = shutil.which("snakedeploy", path=str(Path(SNAKEMAKE).parent))
    subprocess.run([deploy, "deploy-workflow", str(source), str(dest), "--branch", "main"],
                   check=True, capture_output=True)  # fmt: skip
    # nadpipe's config, to edit; the module line snakedeploy writes for a local source points
    # at a workflow/Snakefile beside its own, where there is none: the page says to give the
    # checkout's path
    assert yaml.safe_load((dest / "config/config.yaml").read_text()) == yaml.safe_load(
        (REPO / "config.yaml").read_text()
    )
    snakefile = (dest / "workflow/Snakefile").read_text()
    assert '"workflow/Snakefile"' in snakefile
    snakefile = snakefile.replace('"workflow/Snakefile"', f'"{source}/workflow/Snakefile"')
    (dest / "workflow/Snakefile").write_text(snakefile)
    (dest / "config/config.yaml").write_text(yaml.safe_dump(STUDY))
    # no default target in it: "all", as the page says; without it no false "up to date"
    res = _run(dest)
    assert "every result is up to date" not in res.stdout + res.stderr
    _run(dest, "all")
    pd.testing.assert_frame_equal(_numbers(dest / SUMMARY), plain)
    assert np.isfinite(plain["accuracy"]).all() and len(plain) > 0
