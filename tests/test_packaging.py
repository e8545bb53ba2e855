"""What the package says about itself is true: one version, the Python floor, the extras, the
licence, the citation and the workflow-catalog description."""

import re
import tomllib
from importlib.metadata import version

import yaml
from conftest import REPO

import nadpipe

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_one_version_in_one_place():
    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert version("nadpipe") == nadpipe.__version__
    first = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)[1]
    assert first == nadpipe.__version__
    assert "version" not in yaml.safe_load((REPO / "CITATION.cff").read_text())


def test_python_floor_and_extras_match_what_is_used():
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"  # Snakemake >= 9.0 needs it
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py311"
    slurm = project["optional-dependencies"]["slurm"]
    assert slurm == ["snakemake-executor-plugin-slurm>=2.0.1"]  # slurm-status-command
    assert "slurm-status-command" in (REPO / "profiles/slurm/config.yaml").read_text()
    assert "nadpipe[slurm]" in project["optional-dependencies"]["dev"]  # the Slurm test runs
    assert not any("slurm" in d for d in project["dependencies"])
    assert project["scripts"] == {"nadpipe": "nadpipe.cli:main"}


def test_licence_citation_and_catalog_entry():
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    cited = {r["identifiers"][0]["value"] for r in cff["references"]}
    assert cited == {"arXiv:2006.09717", "arXiv:2104.14372"}  # the NAD and the
    # underspecification papers, as pyproject's URLs name them
    urls = set(PYPROJECT["project"]["urls"].values())
    assert {r["url"] for r in cff["references"]} == urls
    usage = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["software-stack-deployment"]["conda"] is True  # every rule names envs/
    assert usage["report"] is True and re.search(
        r"^report:", (REPO / "Snakefile").read_text(), re.M
    )
