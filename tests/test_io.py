import json
import os
import stat

import pandas as pd
import pytest
import torch

from nadpipe.io import (
    RUN_ENV,
    ArtifactError,
    atomic_write,
    derive_seed,
    generator,
    load_json,
    load_parquet,
    load_torch,
    program,
)


def test_derived_seeds_are_stable_and_distinct():
    # pinned: changing the derivation would silently change every result of every study
    assert derive_seed("pair", 0, 10, 0) == 4101551127530917958
    assert derive_seed("pair", 0, 10, 0) != derive_seed("pair", 0, 1, 0)
    assert derive_seed("pair", 0, 10, 0) != derive_seed("pair", 0, 10, 1)
    assert 0 <= derive_seed("x") < 2**63
    assert generator("a", 1).initial_seed() == derive_seed("a", 1)


def test_torch_artifacts_are_byte_reproducible(tmp_path):
    from nadpipe.io import save_torch

    obj = {"v": torch.arange(10.0), "meta": {"a": 1}}
    save_torch(obj, tmp_path / "a.pt")
    save_torch(obj, tmp_path / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "out" / "file.txt"

    def fails(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, fails)
    assert not target.exists() and list(target.parent.iterdir()) == []
    atomic_write(target, lambda tmp: open(tmp, "w").write("whole"))
    assert target.read_text() == "whole" and len(list(target.parent.iterdir())) == 1


@pytest.mark.parametrize(
    ("name", "write", "read"),
    [
        ("a.pt", lambda p: torch.save({"x": torch.ones(1000)}, p), load_torch),
        ("a.json", lambda p: open(p, "w").write('{"a": [1, 2, 3]}'), load_json),
        ("a.parquet", lambda p: pd.DataFrame({"a": range(1000)}).to_parquet(p), load_parquet),
    ],
)
def test_truncated_artifacts_name_the_file_and_the_rebuild_command(
    tmp_path, monkeypatch, name, write, read
):
    path = tmp_path / name
    write(path)
    read(path)  # whole: reads
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError) as outside:  # a user's own file: no workflow advice
        read(path)
    assert f"{name} cannot be read" in str(outside.value) and "snakemake" not in str(outside.value)
    # in a job of a run started with a config file: the command repeats it
    monkeypatch.setenv(RUN_ENV, json.dumps({"options": ["--configfile", "tiny study.yaml"]}))
    with pytest.raises(ArtifactError) as inside:
        read(path)
    assert str(inside.value).endswith(
        f"Rebuild it with: snakemake --configfile 'tiny study.yaml' --cores all --forcerun {path}"
    )


def test_a_nad_artifact_of_other_settings_is_refused(tmp_path):
    from nadpipe.grid import NadJob
    from nadpipe.io import save_torch
    from nadpipe.jobs import _nad_record, load_nads
    from nadpipe.settings import ModelSpec, NadSettings, Shape

    job = NadJob("lenet", ModelSpec("lenet", {}, Shape(1, 32, 32), 1), NadSettings(n_networks=256))
    path = tmp_path / "nads.pt"
    save_torch({"vectors": torch.eye(4), **_nad_record(job)}, path)
    assert torch.equal(load_nads(str(path), job), torch.eye(4))
    other = NadJob("lenet", job.model, NadSettings(n_networks=512))
    with pytest.raises(
        ArtifactError,
        match=r"nads.pt was computed with other settings.*256.*512.*"
        r"--forcerun .*nads.pt",
    ):
        load_nads(str(path), other)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_get_the_mode_of_the_umask(tmp_path, umask, mode):
    # at 820f241 every artifact was 0600 (mkstemp's mode): a collaborator could not read it
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.txt", lambda tmp: open(tmp, "w").write("x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == mode


def test_a_printed_command_names_the_program_as_the_shell_that_started_it_finds_it(
    tmp_path, monkeypatch
):
    import subprocess
    import sys

    bin_ = tmp_path / "venv" / "bin"
    bin_.mkdir(parents=True)
    script = bin_ / "snakemake"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}/usr/bin:/bin")
    assert program("snakemake", str(script)) == ["snakemake"]  # typed bare, PATH found it
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program("snakemake", str(script)) == [str(script)]  # a venv not on PATH
    assert program("snakemake", "venv/bin/snakemake") == ["venv/bin/snakemake"]  # as typed
    assert program("snakemake", "snakemake") == ["snakemake"]
    main = "/somewhere/site-packages/snakemake/__main__.py"
    python, *rest = program("snakemake", main)
    assert rest == ["-m", "snakemake"] and python in (sys.executable, "python3", "python")
    # each form runs as printed, in the shell that started it
    said = subprocess.run([*program("snakemake", str(script))], capture_output=True, text=True)
    assert said.stdout == "ran\n"
    version = subprocess.run([python, *rest, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip()[0].isdigit()
