"""The SLURM profile's smoke run on a real Slurm, which tests/test_slurm.py checks: a
single-node cluster on loopback (tests/slurm/local_slurm.sh), configs/smoke.yaml through
`snakemake --profile profiles/slurm`, the cluster stopped again.

The run spends most of its two minutes waiting for the SLURM plugin's status checks, not
computing, so the session starts it in the background when it begins (conftest.pytest_configure,
in the process that starts the test processes) and the test, handed out last, reads what it
did; a session that filters its tests (-k, -m) leaves it to the test, which then starts it and
waits. Either way the run is the same process:

    python tests/slurm_smoke.py DIR     writes DIR/result.json: {"started", "rc", "output"}

and DIR/work holds the run's working directory (its results, its logs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "slurm" / "local_slurm.sh"
RESULT = "result.json"
PID = "runner.pid"
ENV = "NADPIPE_TESTS_SLURM_RUN"  # the session's run folder, for the test processes


def command(work: Path) -> list[str]:
    """The smoke config through the SLURM profile, sized for a 2-CPU node (as the test reads).
    Spelled here, not through helpers.snakemake_command: helpers imports conftest (torch, the
    stand-in's registration, the session's environment), which this background process must
    not do."""
    # GPU jobs as on a GPU cluster (gpus.device as the default config has it): each asks SLURM
    # for the cluster's one GPU, which is fake (tests/slurm/local_slurm.sh: its task prolog
    # records what SLURM gave each job and hides the GPU, so the jobs compute on the CPU); the
    # NADs in 2 shards (24 and 16 networks); the smoke config's cell with 2 seeds, trained
    # together (gpus.batch_cells 2): one training job asks the GPU, both cells' jobs claim
    (work / "gpu.yaml").write_text(
        "gpus: {batch_cells: 2}\n"
        "nads: {networks_per_chunk: 8, networks_per_shard: 24}\n"
        "nad_pairs: {seeds: [0, 1]}\n"
    )
    timeout = ["timeout", "-k", "10", "720"]  # Snakemake ignores SIGTERM: -k kills it
    return [
        *timeout,
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(work),
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--configfile",
        str(REPO / "configs" / "smoke.yaml"),
        str(work / "gpu.yaml"),
        # a 2-CPU node: two single-CPU jobs at a time (the evaluations' resources as the profile
        # sets them: a command line's --set-resources replaces the profile's); first status
        # check after 1 s (the plugin then adds 10 s per check that finds no job finished)
        "--set-resources",
        "nads:cpus_per_task=1",
        "nad_shard:cpus_per_task=1",
        "train:cpus_per_task=1",
        "evaluate:mem_mb=16000",
        "evaluate:runtime=2",
        "--slurm-init-seconds-before-status-checks",
        "1",
    ]


def main(folder: Path) -> None:
    """Start the cluster, run the smoke config, stop the cluster; the outcome in RESULT."""
    from system_packages import wait_for_background_install

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops Slurm
    (folder / PID).write_text(str(os.getpid()))
    state, work = folder / "slurm", folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    wait_for_background_install()  # the session's, started when it began (a bare machine)
    try:
        res = subprocess.run(
            ["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=900
        )
        if res.returncode != 0:
            result = {"started": False, "rc": res.returncode, "output": res.stdout + res.stderr}
        else:
            shutil.copy(REPO / "config.yaml", work / "config.yaml")
            run = subprocess.run(command(work), capture_output=True, text=True, cwd=work)
            result = {"started": True, "rc": run.returncode, "output": run.stdout + run.stderr}
            given = state / "given.log"  # the task prolog's: what SLURM gave each job
            result["given"] = given.read_text() if given.exists() else ""
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)
    tmp = folder / f"{RESULT}.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(folder / RESULT)


def start(folder: Path) -> subprocess.Popen:
    """This run in the background, in a session of its own (`stop` ends it and its cluster)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "runner.log", "w")  # noqa: SIM115 -- the runner writes it
    proc = subprocess.Popen(
        [sys.executable, __file__, str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return proc


def wait(folder: Path, deadline_s: float = 1500) -> dict:
    """The run's result, once it has one; fails (AssertionError) when its runner died without
    one or the deadline passed."""
    end = time.monotonic() + deadline_s
    while not (folder / RESULT).exists():
        pid = int((folder / PID).read_text()) if (folder / PID).exists() else None
        if pid is not None and not _alive(pid):
            if (folder / RESULT).exists():  # it wrote its result and ended meanwhile
                break
            log = (folder / "runner.log").read_text(errors="replace")
            raise AssertionError(f"the SLURM smoke run ended without a result:\n{log[-4000:]}")
        if time.monotonic() > end:
            raise AssertionError(f"the SLURM smoke run in {folder} took over {deadline_s} s")
        time.sleep(1)
    return json.loads((folder / RESULT).read_text())


def stop(proc: subprocess.Popen, folder: Path) -> None:
    """End a run still going (the session ended first): its runner stops the cluster. The
    folder of a run that went well is removed; another's is kept to be read."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            subprocess.run(["bash", str(SCRIPT), "stop", str(folder / "slurm")], timeout=120)
    result = folder / RESULT
    if result.exists() and json.loads(result.read_text())["rc"] == 0:
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (the session's own child, not yet reaped) has ended too
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    main(Path(sys.argv[1]))
