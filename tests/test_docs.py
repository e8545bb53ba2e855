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
    # a list the Markdown made a paragraph (no blank line before it: 0a58d4e's studies page
    # read "- a - b" in one paragraph); dead links and anchors fail the strict build itself
    for page in tmp_path.rglob("index.html"):
        for para in re.findall(r"<p>(.*?)</p>", page.read_text(), re.S):
            listed = [ln for ln in para.splitlines()[1:] if re.match(r"\s*([-*+]|1\.) ", ln)]
            assert not listed, (page, listed[0])
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


def test_the_widest_tables_fit_the_text_column_at_1400_px(tmp_path):
    # b879b52: the key table 3 393 px wide in a 696 px column (the meaning column off screen),
    # the summary table 1 480 px
    from browser.chromium import driver

    site = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    d = driver(tmp_path)
    try:
        for page in ("keys", "summary", "bad-inputs"):
            d.get(f"file://{site / page / 'index.html'}")
            column, widest = d.execute_script(
                "const c = document.querySelector('.rst-content');"
                "const t = [...document.querySelectorAll('.rst-content table')];"
                "return [c.clientWidth, Math.max(...t.map(x => x.scrollWidth))];"
            )
            assert d.execute_script("return window.innerWidth") == 1400
            assert 500 < column and widest <= column + 1, (page, widest, column)
    finally:
        d.quit()
