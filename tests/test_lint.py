"""The code gates CI holds the project to: ruff, snakefmt and snakemake --lint."""

import re
import subprocess
import sys

from conftest import REPO


def _run(*cmd):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)


def test_ruff_lint_and_format_are_clean():
    lint = _run(sys.executable, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout


def test_snakefmt_is_clean():
    res = _run(sys.executable, "-m", "snakefmt", "--check", ".")
    assert res.returncode == 0, res.stderr


def test_snakemake_lint_finds_nothing_but_the_missing_conda_envs():
    # `conda:` envs for every rule arrive with issue 6 (software environments); until then the
    # only lint allowed is the one asking for them, once per rule.
    res = _run(sys.executable, "-m", "snakemake", "--lint", "--cores", "1")
    lints = re.findall(r"^\s+\* (.+?):?$", res.stdout + res.stderr, re.M)
    assert lints, "snakemake --lint printed nothing parsable: " + res.stdout[-2000:]
    assert set(lints) == {"Specify a conda environment or container for each rule."}, lints
