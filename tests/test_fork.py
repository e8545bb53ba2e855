"""The suite's Snakemake commands forked from a Python that imported Snakemake already
(tests/snakemake_fork.py) say and do what a new `snakemake` process does."""

import difflib
import os
import re
import subprocess

import helpers
import snakemake
import yaml
from helpers import SNAKEMAKE, TINY, run_snakemake

DRY = [SNAKEMAKE, "-s", str(helpers.REPO / "Snakefile"), "-n", "--cores", "1"]


def said_alike(res) -> list[str]:
    """Exit status and output, less what differs between two new processes as well: Snakemake's
    date, run id and job times, and a job's reasons, which it reads off sets (in the hash order
    each new Python draws): their files kept, not the order or the reason each is listed under."""

    def keep(text: str) -> list[str]:
        text = re.sub(r"^(  Date: .*|  Workflow ID: .*|\[\w{3} \w{3} .*\])\n", "", text, flags=re.M)
        return [str(sorted(re.findall(r"[\w./-]+\.\w+", line))) if "reason: " in line else line
                for line in text.splitlines()]  # fmt: skip

    return [f"exit {res.returncode}", *keep(res.stdout), "-- stderr", *keep(res.stderr)]


def test_a_forked_snakemake_says_what_a_new_process_says(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "broken.py").write_text("raise ImportError('no such thing')\n")
    # a cache of its own: another test process's runs add records a dry run's estimate reads
    env = {**os.environ, "NADPIPE_CACHE": str(tmp_path / "cache")}
    commands = [
        ([SNAKEMAKE, "--version"], env),
        ([*DRY, "--config", "nads={n_networks: 3}"], env),  # a config refused, naming its key
        (DRY, env),
        # the environment given, not the test process's: a study module that cannot be imported
        (DRY, {**env, "NADPIPE_STUDIES": "broken"}),
    ]
    said = []
    for argv, env in commands:
        new = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        forked = run_snakemake(argv, cwd=tmp_path, env=env)
        assert forked.forked
        a, b = said_alike(new), said_alike(forked)
        assert a == b, "\n".join(difflib.unified_diff(a, b, "new process", "forked", lineterm=""))
        said.append((forked.returncode, forked.stdout + forked.stderr))
    assert said[0] == (0, f"{snakemake.__version__}\n")
    assert said[1][0] == 1 and "config key 'nads.n_networks': 3 is less than" in said[1][1]
    assert said[2][0] == 0 and re.search(r"^nads\s+1$", said[2][1], re.M)  # the plan
    assert said[3][0] == 1 and "cannot import the study module 'broken'" in said[3][1]
    # another Python environment (the Snakemake floor's PYTHONPATH) gets a new process, which
    # runs what that environment holds
    (tmp_path / "sitecustomize.py").write_text("import sys; print('started', file=sys.stderr)")
    other = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = run_snakemake([SNAKEMAKE, "--version"], cwd=tmp_path, env=other)
    assert res.returncode == 0 and res.stderr == "started\n" and not hasattr(res, "forked")
