"""The README's code, run as a reader would run it."""

import re
import shutil
import subprocess
import sys

import torch
from conftest import REPO

README = (REPO / "README.md").read_text()


def block(after: str, lang: str) -> str:
    """The first fenced block of `lang` after the text `after`."""
    start = README.index(after)
    return re.search(rf"```{lang}\n(.*?)```", README[start:], re.S)[1]


def test_the_nads_in_python_snippet_runs_as_printed(capsys):
    scope = {}
    exec(block("**From Python**", "python"), scope)  # noqa: S102 -- the README's own code
    art = scope["art"]
    assert scope["nads"].shape == (1024, 1024) and scope["nads"].dtype == torch.float32
    eigenvalues = art["eigenvalues"]
    assert (eigenvalues[:-1] >= eigenvalues[1:]).all()  # by decreasing eigenvalue
    assert set(art["split_half"]["overlap"]) == {1, 10, 50, 100}
    printed = capsys.readouterr().out
    assert "tensor(" in printed and "10:" in printed


def test_your_own_architecture_lines_plan_its_nads_and_trainings(tmp_path):
    mynets = block("Put the builder in a file", "python")
    mine = block("name it in the config", "yaml")
    assert mynets.startswith("# mynets.py") and mine.startswith("# mine.yaml")
    (tmp_path / "mynets.py").write_text(mynets)
    (tmp_path / "mine.yaml").write_text(mine)
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    commands = block("and look at what would run", "")
    dry = commands.splitlines()[0].split("#")[0].split()
    assert dry == ["snakemake", "-n", "--configfile", "mine.yaml"]
    res = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), *dry[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout.split("Job stats:")[1], re.M))
    assert jobs["nads"] == "2" and jobs["train"] == "50"  # LeNet's 25 and small_cnn's 25
    assert "results/nads/small_cnn.pt" in res.stdout
