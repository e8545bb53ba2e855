"""The documentation: its generated pages are what the code says now, the site builds strictly
(no broken link), and the README stays a newcomer's page that points into it."""

import os
import re
import subprocess
import sys

from conftest import REPO, SCHEMA

from nadpipe import config as nc

DOCS = REPO / "docs"


def test_generated_pages_are_up_to_date():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run([sys.executable, str(DOCS / "generate.py"), "--check"], env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert nc.reference_table(SCHEMA) in (DOCS / "keys.md").read_text()
    catalogue = (DOCS / "bad-inputs.md").read_text()
    for key in ("'fourier.size'", "'gpus.slots'", "--n-networks", "--out"):
        assert key in catalogue


def test_the_site_builds_strictly(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    for page in pages:  # every page is in the site, none left out of its navigation
        built = tmp_path / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), page
        assert f"{page}.md" in (REPO / "mkdocs.yml").read_text()
    api = (tmp_path / "api" / "index.html").read_text()  # rendered from the docstrings
    assert "a callable without arguments that returns the one-logit network" in api
    assert "nadpipe.bases.compare" in api and "nadpipe.references.read" in api
    keys = (tmp_path / "keys" / "index.html").read_text()
    assert "gpus.batch_cells" in keys and "nads.n_networks" in keys


def test_the_readme_is_a_newcomers_page_that_points_into_the_docs():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    assert "TODO" not in readme
    links = re.findall(r"\]\(([^)#]+)", readme)
    assert links and all((REPO / link).exists() for link in links), links
    for page in ("docs/keys.md", "docs/bad-inputs.md", "docs/trust.md", "docs/scaling.md"):
        assert page in links
    study, tests = readme.splitlines()[3:5]  # the first two lines of the first block
    assert study.endswith("# install, run the default study") and tests.endswith("run the tests")
    assert ".venv/bin/pip install" in study and ".venv/bin/pip install" in tests  # in a venv
    ci = (REPO / ".ci" / "run").read_text()
    test_command = tests.split("#")[0].strip()
    assert test_command in ci  # CI runs exactly the README's test command
