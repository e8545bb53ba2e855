"""The study registry is closed: a study defined only here, registered by its own module
(named in the config's study_modules), runs end to end through the real DAG (NADs, training,
evaluation, the summary, its figure, the report) without a line of nadpipe changed.
docs/pipeline.md's "Adding a study" is this test's recipe."""

import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import yaml
from conftest import REPO
from helpers import command, snakemake, suggested

from nadpipe import row

TOY = (REPO / "docs" / "toystudy.py").read_text()  # the example docs/pipeline.md shows


def test_a_study_of_its_own_runs_end_to_end_through_the_real_dag(tmp_path):
    (tmp_path / "toystudy.py").write_text(TOY)
    config = {
        "study_modules": ["toystudy"],  # beside the config, in the working directory
        "architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [32]}}},
        "nads": {"n_networks": 24},
        "nad_pairs": {"enabled": False},
        "toy": {"enabled": True, "architectures": ["mlp"], "indices": [0, 3], "eps": 4.0},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "NADPIPE_STUDIES"}
    res = snakemake(tmp_path, "--cores", "2", env=env)
    out = res.stdout + res.stderr
    # its findings, said at the end of the run, and by `nadpipe runs` from its folder (10c1e0f:
    # "(no finding stated)": the study is the config's module's, which it now imports)
    assert re.search(r"- toy: toy found mean test accuracy \d\.\d\d", out)
    runs = subprocess.run([str(Path(sys.executable).parent / "nadpipe"), "runs"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)  # fmt: skip
    listed = next(line for line in runs.stdout.splitlines() if line.startswith("results/ "))
    assert re.search(r"toy: toy found mean test accuracy \d\.\d\d", listed), runs.stdout
    df = pd.read_parquet(tmp_path / "results/toy/summary.parquet")
    assert set(df["toy_k"]) == {0, 3} and set(df["condition"]) == {"all"}
    assert set(df["variant"]) == {"toy-0", "toy-3"}  # its own path format
    assert (df["eps"] == 4.0).all() and (df["n_train"] == 512).all() and (df["epochs"] == 10).all()
    # margin 4 against unit noise: learned, well above chance on the test split
    assert df.loc[df["split"] == "test", "accuracy"].min() > 0.9
    # its rows are the declared row (nadpipe.row), with its variant's and data's columns
    assert [c for c in df if not row.declared(c, ("toy_k",), ("eps", "n_train"))] == []
    img = mpimg.imread(tmp_path / "results/toy/plots/accuracy_mlp.png")
    assert img.shape[1] >= 300 and img.std() > 0.05
    # the report, by the command the run printed, typed exactly as printed: the config names
    # the study, so nothing else is needed
    said = re.search(r"The report \(figures, tables, the config that ran\): (.+)", out)[1]
    assert said == suggested(tmp_path, "--report", "results/report.html")
    res = command(tmp_path, said, env=env)
    html = (tmp_path / "results/report.html").read_text(errors="replace")
    assert "accuracy_mlp.png" in html and "summary_toy.html" in html
    landing = (tmp_path / "results/report/landing.rst").read_text()
    assert "D(NAD k) with isotropic noise" in landing
    # the study's code is a dependency of its cells: an edit reruns them (and no other study's)
    assert "Nothing to be done" in snakemake(tmp_path, "-n", "--cores", "1", env=env).stdout
    (tmp_path / "toystudy.py").write_text(TOY + "\n# an edit of the study's module\n")
    plan = snakemake(tmp_path, "-n", "--cores", "1", env=env).stdout
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.split("Job stats:")[1], re.M))
    assert jobs["train"] == "2" and jobs["evaluate"] == "2" and "nads" not in jobs, jobs
    # a key the study does not have is refused naming the key, like a built-in study's
    config["toy"]["epsilon"] = 1.0
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    bad = snakemake(tmp_path, "-n", "--cores", "1", env=env, check=False)
    said = bad.stdout + bad.stderr
    assert bad.returncode != 0 and "unknown key 'toy.epsilon' (did you mean 'eps'?)" in said, said


def test_a_study_module_that_cannot_be_imported_is_named_with_its_key(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"study_modules": ["broken"]}))
    res = snakemake(tmp_path, "-n", "--cores", "1", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out
    assert ("config key 'study_modules.0': cannot import the study module 'broken' "
            "(ModuleNotFoundError: No module named 'no_such_module_here')") in out  # fmt: skip
    # the environment variable, where it is still used, is named in what it causes
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"nad_pairs": {"indices": [0]}}))
    env = {**os.environ, "NADPIPE_STUDIES": "broken"}
    res = snakemake(tmp_path, "-n", "--cores", "1", check=False, env=env)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "environment variable NADPIPE_STUDIES: cannot import the study module 'broken'" in out
    (tmp_path / "fine.py").write_text(TOY)
    env = {**os.environ, "NADPIPE_STUDIES": "fine", "PYTHONPATH": str(tmp_path)}
    res = snakemake(tmp_path, "-n", "--cores", "1", env=env)
    assert "name them in the config instead (study_modules: [fine])" in res.stdout + res.stderr
    # as it says: in the config, the variable unset
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({"study_modules": ["fine"], "nad_pairs": {"indices": [0]}})
    )
    env = {k: v for k, v in os.environ.items() if k != "NADPIPE_STUDIES"}
    res = snakemake(tmp_path, "-n", "--cores", "1", env=env)
    assert "NADPIPE_STUDIES" not in res.stdout + res.stderr
    # a module that imports but registers nothing (0a58d4e: accepted without a word)
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"study_modules": ["empty"]}))
    res = snakemake(tmp_path, "-n", "--cores", "1", check=False, env=env)
    assert res.returncode != 0 and "Traceback" not in res.stdout + res.stderr
    assert ("config key 'study_modules.0': the study module 'empty' imports, but registers no "
            "study") in res.stdout + res.stderr  # fmt: skip


def test_no_module_outside_the_registry_names_a_study():
    """Study names appear in the registry (studies.py, and the study blocks' defaults in
    settings.py), the schema and the configs, never in the code that runs them."""
    from nadpipe.studies import REGISTRY

    names = "|".join(REGISTRY)
    found = []
    code = [
        *sorted((REPO / "src/nadpipe").rglob("*.py")),
        REPO / "Snakefile",
        *sorted((REPO / "workflow").rglob("*.smk")),
        *sorted((REPO / "workflow").rglob("*.py")),
    ]
    for path in code:  # fmt: skip
        if path.name in ("studies.py", "settings.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            text = line.split("#")[0]
            if re.search(rf"[\"']({names})[\"']", text):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []


def test_a_variant_without_what_its_study_needs_is_refused_in_words():
    # b879b52: a study whose settings have NAD indices and whose variant lacks nad_indices
    # stopped with a raw AttributeError in the config check
    from dataclasses import dataclass
    from typing import ClassVar

    import pytest

    from nadpipe.studies import REGISTRY, NadPairs, Variant, register

    @dataclass(frozen=True)
    class Silent(Variant):
        k: int
        FORMAT: ClassVar[str] = "s{k}"
        COLUMNS: ClassVar[dict[str, str]] = {"s_k": "an index"}

    class Quiet(NadPairs):
        name = "quiet"
        variant = Silent

    with pytest.raises(ValueError, match=r"variant Silent must say which NADs a cell uses"):
        register(Quiet())

    class Bare(NadPairs):
        name = "bare"
        variant = type("Bare", (), {"PATTERN": "b", "COLUMNS": {}})

    with pytest.raises(ValueError, match=r"lacks parse, columns, path, nad_indices; derive it"):
        register(Bare())
    assert "quiet" not in REGISTRY and "bare" not in REGISTRY
