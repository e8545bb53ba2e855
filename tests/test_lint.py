"""The code gates CI holds the project to: ruff, snakefmt and snakemake --lint."""

import re
import subprocess
import sys
from importlib.metadata import requires

import yaml
from conftest import REPO
from helpers import SNAKEMAKE, run_snakemake, snakemake_here


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


def test_snakemake_lint_is_clean_for_every_rule(tmp_path):
    # every rule has its conda env; the conditional rules (seed ensembles, CIFAR download) too
    both = tmp_path / "both.yaml"
    both.write_text("nad_pairs: {group_seeds: true}\ncifar10: {download: true}\n")
    for extra in ([], ["--configfile", str(both)]):
        res = snakemake_here(REPO, "--lint", "--cores", "1", *extra, check=False)
        out = res.stdout + res.stderr
        assert res.returncode == 0 and "Congratulations" in out, out[-3000:]


def test_conda_env_pins_every_runtime_dependency():
    env = yaml.safe_load((REPO / "envs" / "nadpipe.yaml").read_text())
    assert env["channels"][0] == "conda-forge"
    pins = dict(d.split("=", 1) for d in env["dependencies"])
    assert all(re.fullmatch(r"\d+(\.\d+)*", v) for v in pins.values()), pins
    conda_name = {"torch": "pytorch", "matplotlib": "matplotlib-base"}
    runtime = [d for d in requires("nadpipe") if "extra ==" not in d]  # installed metadata
    assert any(d.startswith("torchvision") for d in runtime)
    for dep in runtime:
        name = re.split(r"[<>=!; (]", dep)[0]
        if name.startswith("snakemake"):  # the jobs run under the snakemake that started them
            continue
        assert conda_name.get(name, name) in pins, f"{name} is not in envs/nadpipe.yaml"
    deploy = (REPO / "envs" / "nadpipe.post-deploy.sh").read_text()
    assert "pip install --no-deps" in deploy and "NADPIPE_RUN" in deploy


def test_every_job_a_script_names_is_in_the_job_table_and_resolves():
    # jobs are named, not addressed by "module:function" strings: a script's name that the
    # table lacks would fail only when its rule runs
    from nadpipe.jobtable import JOBS, job

    named = {
        m[1]
        for script in (REPO / "workflow" / "scripts").glob("*.py")
        for m in re.finditer(r"run_job\(\s*\"(\w+)\"", script.read_text())
    }
    assert named == set(JOBS) - {"process"}  # which checks the warm server (test_workflow.py)
    assert all(callable(job(name)) for name in JOBS)
    assert not re.search(r"\"nadpipe\.\w+:\w+\"", "".join(
        p.read_text() for p in (*(REPO / "workflow").rglob("*.py"), *(REPO / "src").rglob("*.py"))
    ))  # fmt: skip


def test_what_nadpipe_reads_of_snakemakes_internals_exists_in_the_installed_snakemake(tmp_path):
    # nadpipe.runner.surface holds every read of Snakemake beyond a Snakefile's documented
    # objects; a Snakemake that moves one fails here, naming it (tests/test_floor.py: the floor)
    (tmp_path / "Snakefile").write_text(PROBE)
    res = run_snakemake([SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "-n", "--cores", "1",
                         "-d", str(tmp_path)], REPO)  # fmt: skip
    assert "nadpipe.runner.surface lacks: []" in res.stdout + res.stderr, res.stderr[-2000:]
    assert PLANNED in res.stdout, res.stdout[-2000:]


PROBE = """from nadpipe.runner.surface import on_dry_run_end, own_rule_name, planned_jobs, probe

print("nadpipe.runner.surface lacks:", probe(workflow))
own = own_rule_name(workflow)
on_dry_run_end(lambda: print(f"nadpipe.runner.surface planned: {planned_jobs(workflow, own)}"))


rule all:
    input:
        "out.txt",


rule make:
    output:
        "out.txt",
    shell:
        "touch {output}"
"""
# what the probe's dry run ends with: its jobs, with their rule and wildcards
PLANNED = "nadpipe.runner.surface planned: [('all', {}), ('make', {})]"
