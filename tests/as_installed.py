"""The user's path, as the README's first command installs nadpipe (no extras): run by the
README's test command between that install and the dev extras' (pytest cannot check it: the
suite's own environment has the extras). Then the Snakemake floor for tests/test_floor.py.

In a temporary folder: the micro study (nadpipe.acceptance.micro_config, one cell of every study,
on CIFAR-10-like files) with the `snakemake` this install put on PATH, as a user types it; the
report command that run printed, typed exactly as printed; beside the micro study, `nadpipe
doctor` (no package missing) and `nadpipe nads` of a registry model. Each step's values are
checked, not only its exit status.

Beside all that, from the start: `pip install --target .venv/snakemake-floor
'snakemake[reports]==FLOOR'`, the lowest Snakemake that pyproject.toml declares, beside (not
over) the newest, for tests/test_floor.py, which runs the micro study with it. The one download
of the suite, from the package registry.

Usage: .venv/bin/python tests/as_installed.py   (exit 0: every check held)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the install's console scripts: snakemake, nadpipe
FLOOR_DIR = REPO / ".venv" / "snakemake-floor"
DEV_ONLY = ("pytest", "selenium", "mkdocs")  # what only the dev extras bring


def floor() -> str:
    """The lowest Snakemake pyproject.toml declares ('9.0' of 'snakemake[reports]>=9.0')."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(r"snakemake\b", d))
    return re.search(r">=\s*([\d.]+)", spec)[1]


def start(args: list[str], cwd: Path, what: str, activated: bool = True) -> tuple:
    """Start `args` as a user would from `cwd`, with this install's scripts first on PATH (as
    after `. .venv/bin/activate`; else PATH as it was, as in the shell of the README's first
    line). `finish` waits for it."""
    path = os.environ.get("PATH", "")
    if activated:
        path = f"{BIN}{os.pathsep}{path}"
    else:
        path = os.pathsep.join(p for p in path.split(os.pathsep) if Path(p) != BIN)
    env = {**os.environ, "PATH": path}
    env.pop("PYTHONPATH", None)
    # files, not pipes: a command that runs beside others must not wait for its reader
    out, err = (tempfile.TemporaryFile("w+") for _ in range(2))  # closed by finish
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
    return proc, (out, err), what, time.perf_counter()


def finish(started: tuple) -> str:
    """The output of a command `start` started, or stop with it when it failed."""
    proc, files, what, began = started
    proc.wait()
    out = ""
    for file in files:  # stdout, then stderr
        with file:
            file.seek(0)
            out += file.read()
    print(f"  {what}: `{shlex.join(proc.args)}` rc {proc.returncode}, "
          f"{time.perf_counter() - began:.0f} s", flush=True)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"as_installed: {what} failed:\n{out[-4000:]}")
    return out


def run(args: list[str], cwd: Path, what: str, activated: bool = True) -> str:
    """`args` run as a user would from `cwd` (`start`): its output."""
    return finish(start(args, cwd, what, activated))


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"as_installed: {message}")


def user_path(work: Path) -> str:
    """The user's path in `work`; returns the install command the doctor gave."""
    import pandas as pd
    import yaml

    from nadpipe.acceptance import micro_config
    from nadpipe.cifar import write_cifar10_like

    write_cifar10_like(str(work / "cifar"), n_train=96, n_test=48, seed=2)
    (work / "micro.yaml").write_text(yaml.safe_dump(micro_config("cifar")))
    snakefile = str(REPO / "Snakefile")
    # the doctor and `nadpipe nads` read nothing the micro study writes: they run beside it
    nads = ["nadpipe", "nads", "--model", "lenet", "--n-networks", "24", "--out", "lenet.pt"]
    beside = start(["nadpipe", "doctor"], work, "nadpipe doctor"), start(nads, work, "nadpipe nads")
    # as the README's first line types it: the venv's snakemake by its path, PATH without it
    snakemake = str(BIN / "snakemake")
    out = run([snakemake, "-s", snakefile, "--cores", "2", "--configfile", "micro.yaml"], work,
              "the micro study", activated=False)  # fmt: skip
    summary = pd.read_parquet(work / "results-micro" / "nad_pairs" / "summary.parquet")
    check(set(summary["arch"]) == {"lenet", "mlp"} and summary["accuracy"].between(0, 1).all(),
          f"the micro study's nad_pairs summary is wrong:\n{summary}")  # fmt: skip
    printed = re.search(r"^The report \(.*?\): (\S*snakemake .*)$", out, re.M)
    check(printed is not None, f"the run printed no report command:\n{out[-3000:]}")
    command = printed[1]
    check(command.startswith(f"{snakemake} -s ") and "--report results-micro/report.html" in
          command, f"report command: {command}")  # fmt: skip
    run(shlex.split(command), work, "the report command, as printed", activated=False)
    html = (work / "results-micro" / "report.html").read_text(errors="replace")
    check(len(html) > 100_000 and "nad_pairs" in html, "the report lacks the study")

    # the plain install has what every command of the workflow needs but the SLURM profile's
    # executor (the extra `slurm`), which the doctor names with its install command
    doctor = finish(beside[0])
    missing = re.findall(r"^MISSING: (.*)$", doctor, re.M)
    slurm = ("snakemake-executor-plugin-slurm, which `snakemake --profile profiles/slurm` needs: "
             "pip install -e '.[slurm]'")  # fmt: skip
    check(missing == [slurm], f"nadpipe doctor names other missing packages:\n{doctor}")
    check(re.search(r"^pygments \d", doctor, re.M) is not None, f"doctor: {doctor}")

    finish(beside[1])
    import torch

    art = torch.load(work / "lenet.pt", weights_only=False)
    values = art["eigenvalues"]
    check(art["vectors"].shape == (1024, 1024) and bool((values[:-1] >= values[1:]).all()),
          "nadpipe nads wrote no basis by decreasing eigenvalue")  # fmt: skip
    return missing[0].split("needs: ")[1]


def doctors_advice(advice: str) -> None:
    """What the doctor said to do, done exactly (from the checkout, with this install's pip
    first on PATH), then the doctor again: nothing missing."""
    run(shlex.split(advice), REPO, "the doctor's advice")
    doctor = run(["nadpipe", "doctor"], REPO, "nadpipe doctor, after it")
    check("MISSING" not in doctor, f"nadpipe doctor still names a missing package:\n{doctor}")


def install_floor() -> tuple[subprocess.Popen, float] | None:
    """Start installing the floor, beside the user's path (it waits on the package registry
    more than on the CPU); None when it is there already. `floor_installed` waits for it."""
    marker = FLOOR_DIR / "VERSION"
    if marker.exists() and marker.read_text().strip() == floor():
        print(f"  Snakemake {floor()} already under {FLOOR_DIR}")
        return None
    args = [sys.executable, "-m", "pip", "install", "-q", "--target", str(FLOOR_DIR), "--upgrade",
            f"snakemake[reports]=={floor()}"]  # fmt: skip
    out = subprocess.PIPE
    return subprocess.Popen(args, stdout=out, stderr=out, text=True), time.perf_counter()


def floor_installed(started: tuple[subprocess.Popen, float] | None) -> None:
    if started is None:
        return
    proc, start = started
    out = "".join(proc.communicate())
    what = f"Snakemake's floor (snakemake[reports]=={floor()}) for tests/test_floor.py"
    seconds = time.perf_counter() - start
    print(f"  {what}, beside it: `{shlex.join(proc.args)}` rc {proc.returncode}, {seconds:.0f} s")
    if proc.returncode != 0:
        sys.exit(f"as_installed: {what} failed:\n{out[-4000:]}")
    (FLOOR_DIR / "VERSION").write_text(floor() + "\n")


def main() -> int:
    extras = [m for m in DEV_ONLY if importlib.util.find_spec(m) is not None]
    floor_install = install_floor()
    if extras:
        print(f"as_installed: this environment has the dev extras ({', '.join(extras)}), so it "
              f"is not the plain install the user's path needs; a fresh venv checks it "
              f"(python3 -m venv .venv-plain && .venv-plain/bin/pip install -e . && "
              f".venv-plain/bin/python tests/as_installed.py)")  # fmt: skip
    else:
        print("as_installed: the user's path in the plain install (no extras):", flush=True)
        with tempfile.TemporaryDirectory(prefix="nadpipe-as-installed-") as tmp:
            advice = user_path(Path(tmp))
        doctors_advice(advice)
    floor_installed(floor_install)
    print(json.dumps({"as_installed": "ok", "plain": not extras, "snakemake_floor": floor()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
