"""Faults a user meets, one test per class: each is refused before any work with the key or
argument named, or survived with nothing lost; never a traceback, and the exit status is true.
Every command a message gives is run as given."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import helpers
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, SCHEMA
from helpers import TINY, snakemake_here

from nadpipe import config as nc

SCRIPT = str(Path(sys.executable).parent / "nadpipe")
SNAKEMAKE = [helpers.SNAKEMAKE, "-s", str(REPO / "Snakefile")]


def snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return helpers.run_snakemake([*SNAKEMAKE, *args], cwd=cwd)


def test_output_into_a_full_disk_is_said_in_one_line():
    with open("/dev/full", "w") as full:
        res = subprocess.run([SCRIPT, "config"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr == "nadpipe config: cannot write the output: No space left on device\n"


@pytest.mark.parametrize(
    "args, said",
    [
        (["--scale", "0"], "argument --scale: 0 is not an integer from 1 to 1000000"),
        (["--offset", str(10**30)], f"argument --offset: {10**30} is not an integer from"),
        (["--scale", "1e23"], "argument --scale: '1e23' is not an integer"),
    ],
)
def test_versus_refuses_frequencies_out_of_reach_naming_the_flag(args, said, tmp_path):
    res = subprocess.run([SCRIPT, "versus", "a.parquet", "b.csv", *args], cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and said in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "results, said",
    [
        (".git", "'.git' is .git/, a folder of git's, Snakemake's"),
        ("out/.snakemake/x", "is inside .snakemake/, a folder of git's, Snakemake's"),
        ("config.yaml", "'config.yaml' is a file, not a folder"),
    ],
)
def test_a_results_folder_that_is_not_one_is_refused(results, said, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("{}\n")
    with pytest.raises(nc.ConfigError, match=re.escape(said)):
        nc.load_config({"results": results}, SCHEMA)


def test_config_file_names_and_results_folders_that_work_are_taken(tmp_path, monkeypatch):
    # a space, an accent, a comma, '=': paths like any other (0a58d4e refused them; before
    # 0.8.0 they ran); '..x' is no folder of git's or Snakemake's (0a58d4e: "inside ..x/")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    name = "my study é,a=1.yaml"
    (tmp_path / name).write_text("nads: {n_networks: 30}\n")
    res = snakemake(tmp_path, "--cores", "1", "results-my study é,a=1/config.yaml",
                    "--configfile", name)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    saved = yaml.safe_load((tmp_path / "results-my study é,a=1/config.yaml").read_text())
    assert saved["nads"]["n_networks"] == 30
    monkeypatch.chdir(tmp_path)
    assert nc.results_root(nc.load_config({"results": "..x"}, SCHEMA)[0]) == "..x"


def test_odd_config_file_names_and_repeated_overrides_are_refused_before_any_job(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "a{b}.yaml").write_text("nads: {n_networks: 30}\n")
    res = snakemake_here(tmp_path, "-n", "--configfile", "a{b}.yaml", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out
    assert "gives the results folder 'results-a{b}'" in out and "the key `results`" in out
    # as it says: the config's own folder
    said = re.search(r"\(the key `results`, e\.g\. (--config results=[\w-]+)\)", out)[1]
    res = snakemake_here(
        tmp_path, "-n", "--configfile", "a{b}.yaml", *shlex.split(said), check=False
    )
    assert res.returncode == 0 and "results-mine/nads/mlp.pt" in res.stdout

    # two --config: Snakemake would keep the last alone
    res = snakemake_here(tmp_path, "-n", "--config", "nads={n_networks: 30}", "--config",
                    "results=results-two", check=False)  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "--config is given 2 times" in out
    # as it says: one --config, every override after it
    res = snakemake_here(
        tmp_path, "-n", "--config", "nads={n_networks: 30}", "results=results-two", check=False
    )
    assert res.returncode == 0 and "results-two/nads/mlp.pt" in res.stdout


def test_an_override_that_a_more_specific_key_shadows_is_said(tmp_path):
    config = {**TINY, "architectures": {"mlp": {**TINY["architectures"]["mlp"],
                                                "nads": {"n_networks": 40}}}}  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    res = snakemake_here(tmp_path, "-n", "--config", "nads={n_networks: 50, seed: 1}", check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0
    said = (
        "--config nads.n_networks=50 does not reach mlp: the config's own "
        "architectures.mlp.nads.n_networks (40) comes first, so mlp keeps 40"
    )
    assert said in out
    assert "nads.seed=1 does not reach" not in out  # that one does reach it
    # as it says: override that key (the resolved config, every default filled in, holds it)
    fix = "architectures={mlp: {nads: {n_networks: 50}}}"
    res = snakemake(tmp_path, "--cores", "1", "--until", "resolved_config", "--config", fix)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "does not reach" not in out
    resolved = yaml.safe_load((tmp_path / "results/config.yaml").read_text())
    assert resolved["architectures"]["mlp"]["nads"]["n_networks"] == 50
    assert resolved["architectures"]["mlp"]["kwargs"] == {"hidden": [16]}  # merged, not replaced


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    work = tmp_path_factory.mktemp("finished")
    (work / "config.yaml").write_text(yaml.safe_dump(TINY))
    res = snakemake(work, "--cores", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    return work


def _damage(path: Path, data: bytes) -> None:
    """Overwrite `path` with `data`, keeping its time (Snakemake then sees nothing)."""
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


DAMAGED = ["nad_pairs/summary.parquet", "nad_pairs/eval/mlp/i0_j0_s0.npz", "config.yaml",
           "nads/mlp.json"]  # fmt: skip


def test_damaged_results_that_kept_their_time_are_named_with_the_command_that_remakes_them(
    finished,
):
    summary = pd.read_parquet(finished / "results/nad_pairs/summary.parquet")
    for name in DAMAGED:  # cut short, or overwritten with what is no file of its kind
        path = finished / "results" / name
        whole = path.read_bytes()
        _damage(path, whole[: len(whole) // 2] if name.endswith((".parquet", ".npz")) else
                b"{: [\n")  # fmt: skip
    res = snakemake(finished, "--cores", "2")
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out[-3000:]
    listed = re.search(r"(\d+) file\(s\) they stand on cannot be read \(cut short or "
                       r"overwritten, with their old time\): (.*?)\. Remake", out)  # fmt: skip
    assert listed[1] == "4" and sorted(listed[2].split(", ")) == sorted(
        f"results/{name}" for name in DAMAGED
    )
    assert "every result is up to date" not in out
    command = re.search(r"Remake them and what was made from them with: (.+)$", out, re.M)[1]
    helpers.command(finished, command)  # exactly as given; fails with its output
    after = pd.read_parquet(finished / "results/nad_pairs/summary.parquet")
    numeric = summary.select_dtypes("number").columns
    assert np.allclose(after[numeric], summary[numeric], equal_nan=True)  # nothing lost
    assert "every result is up to date" in snakemake(finished, "--cores", "2").stderr


def test_inputs_that_were_accepted_without_a_word_are_refused_or_said(tmp_path):
    # (0a58d4e accepted each of these silently)
    def dry(config: dict | str, *extra: str, env=None) -> str:
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        (tmp_path / "config.yaml").write_text(text)
        res = helpers.run_snakemake([*SNAKEMAKE, "-n", "--cores", "1", *extra], tmp_path, env)
        return res.stdout + res.stderr

    small = {"nad_pairs": {"indices": [0], "n_test": 100}}
    # a GPU lock folder nobody can write: refused, naming the key
    out = dry({**small, "gpus": {"lock_dir": "/dev/null/slots"}})
    assert "config key 'gpus.lock_dir': '/dev/null/slots' cannot be made or written here" in out
    assert '  File "' not in out  # a refusal, not a traceback (0a58d4e: three lines of one)
    # CUDA asked for on a machine without it: said in a dry run already
    if not os.path.exists("/proc/driver/nvidia"):
        assert "'gpus.device' is cuda, but this machine shows no GPU" in dry(
            {**small, "gpus": {"device": "cuda"}}
        )
    # more analysis points than test points: said, with what is used
    out = dry({**small, "analysis": {"n_points": 500}})
    assert "'analysis.n_points' (500) is more than nad_pairs.n_test (100)" in out
    # a key given twice: refused with both lines (YAML keeps the last)
    out = dry("nad_pairs: {indices: [0]}\nnads: {n_networks: 40}\nnads: {seed: 1}\n")
    assert (
        "line 3, column 1: not valid YAML: the key 'nads' is given twice (at lines 2 and 3)" in out
    )
    # in a --configfile too
    (tmp_path / "more.yaml").write_text("nads: {seed: 1}\nnads: {seed: 2}\n")
    out = dry(small, "--configfile", "more.yaml")
    assert "more.yaml, line 2, column 1: not valid YAML: the key 'nads' is given twice" in out


def test_the_doctor_does_not_count_gpus_torch_cannot_use():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a machine with CUDA")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    res = subprocess.run([SCRIPT, "doctor"], capture_output=True, text=True, env=env)
    assert "CUDA_VISIBLE_DEVICES 0 names GPU(s), but torch finds none" in res.stdout
    assert "1 GPU job slot" not in res.stdout  # 0a58d4e: both "no device" and a slot
    # a CUDA build without a GPU: how to install without its libraries
    said = "torch here is a CUDA build on a machine without a GPU" in res.stdout
    assert said == bool(torch.version.cuda), res.stdout


def test_answers_say_what_is_wanted_and_how_to_give_it(tmp_path):
    # a value that starts with '-' reaches its option's own check (0a58d4e: argparse's
    # "expected one argument", while --flag=value got the good message)
    res = subprocess.run([SCRIPT, "nads", "--model", "lenet", "--shape", "-1,32,32", "--out",
                          str(tmp_path / "x.npy")], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "--shape -1,32,32: C, H and W must be at least 1" in res.stderr
    search = [SCRIPT, "search", "--study", "single_direction", "--arch", "lenet"]
    res = subprocess.run([*search, "--snakemake", "-n"], capture_output=True, text=True,
                         cwd=tmp_path)  # fmt: skip
    assert res.returncode == 2 and "a search runs its rounds for real" in res.stderr
    # a model kwarg of another kind: the kind it takes (0a58d4e: "'int' object is not iterable")
    config = {"architectures": {"m": {"model": "mlp", "kwargs": {"hidden": 32}}},
              "nad_pairs": {"architectures": ["m"], "indices": [0]}}  # fmt: skip
    with pytest.raises(nc.ConfigError, match=r"'architectures.m.kwargs.hidden': model 'mlp': "
                       r"hidden is 32, an integer; it takes a list of integers \(its default: "
                       r"\[100, 20\]\)"):  # fmt: skip
        nc.load_config(config, SCHEMA)
    # a Fourier grid past the model's inputs: their limit, not the schema's bound of 64 first
    config = {"nad_pairs": {"enabled": False},
              "fourier": {"enabled": True, "architectures": ["lenet"], "size": 100}}  # fmt: skip
    with pytest.raises(nc.ConfigError, match="'fourier.size': 100 is greater than the maximum "
                       "of 32 \\(lenet's inputs are 1x32x32"):  # fmt: skip
        nc.load_config(config, SCHEMA)
    # a study of one's own whose module is not named: where to name it
    with pytest.raises(
        nc.ConfigError,
        match="unknown key 'toy' \\(a study of one's own is a "
        "key once its module registers it: name that module under study_modules",
    ):
        nc.load_config({"toy": {"enabled": True}}, SCHEMA)


def test_a_nadpipe_run_variable_left_in_the_environment_is_not_this_runs(tmp_path):
    # 10c1e0f: Snakemake's JSONDecodeError, naming nothing; a valid one of another run was
    # merged into this run's values (its batches file, its options)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    garbage = {**os.environ, "NADPIPE_RUN": "{garbage"}
    res = helpers.snakemake(tmp_path, "-n", "--cores", "1", env=garbage)  # a process of its own
    assert "the environment variable NADPIPE_RUN holds '{garbage', none of a run's values" in (
        res.stderr
    )
    other = {"batches": str(tmp_path / "elsewhere/batches.json"), "options": ["--nope"],
             "slots": [{"gpu": 7}], "study_modules": []}  # fmt: skip
    res = helpers.snakemake(tmp_path, "--cores", "2",
                            env={**os.environ, "NADPIPE_RUN": json.dumps(other)})  # fmt: skip
    assert "NADPIPE_RUN" not in res.stderr and "--nope" not in res.stderr + res.stdout
    assert not (tmp_path / "elsewhere").exists()
    assert len(pd.read_parquet(tmp_path / "results/nad_pairs/summary.parquet")) > 0


def test_a_dotted_config_key_is_given_nested_as_the_refusal_says(tmp_path):
    # Snakemake refuses `--config nads.n_networks=50` before it reads the workflow, in words
    # that name neither the key nor a way (docs/bad-inputs.md); `nadpipe search --snakemake`
    # says the nested form (test_search), which the workflow takes as a file's value
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({**TINY, "nads": {"n_networks": 24, "seed": 3}})
    )
    res = snakemake(tmp_path, "-n", "--cores", "1", "--config", "nads.n_networks=50")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Config entry must start with a valid identifier" in out
    from nadpipe.cli.common import dotted_config  # deferred: the cli is this test's alone

    said = dotted_config(["--config", "nads.n_networks=50"])
    nested = shlex.split(said.split("in YAML: ")[1])
    res = snakemake(tmp_path, "--cores", "1", "results/config.yaml", *nested)
    assert res.returncode == 0, res.stderr[-2000:]
    resolved = yaml.safe_load((tmp_path / "results/config.yaml").read_text())
    assert resolved["nads"]["n_networks"] == 50  # typed as a file's value
    assert resolved["nads"]["seed"] == 3  # the other keys of nads kept
