"""What several test files share: running Snakemake as a user does (and the commands it
suggests, exactly as printed), and every job of the micro study in-process. Test files import
from here, never from each other."""

import contextlib
import io
import json
import os
import pickle
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from conftest import REPO
from torch import nn

from nadpipe.backend import Backend
from nadpipe.batching import batch_key, stackable
from nadpipe.grid import Plan
from nadpipe.io import load_torch
from nadpipe.jobs import evaluate_job, nads_job, train_job, train_together_job

# a study of one small MLP cell, for the tests of runs side by side and of faults
TINY = {
    "architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [16]}}},
    "nads": {"n_networks": 24},
    "nad_pairs": {
        "architectures": ["mlp"],
        "indices": [0],
        "seeds": [0],
        "n_train": 200,
        "n_test": 100,
        "train": {"epochs": 2},
    },
    "analysis": {
        "n_points": 8,
        "margin_steps": 8,
        "cross_section": {"n_points": 1, "resolution": 5},
        "transitions": {"n_trajectories": 1, "n_points": 8},
    },
}


# Snakemake's own command, as the README's first line types it (.venv/bin/snakemake), and how
# the commands nadpipe prints name it: bare where PATH finds it, else by that path
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
ON_PATH = os.path.realpath(shutil.which("snakemake") or "") == os.path.realpath(SNAKEMAKE)
PRINTED = "snakemake" if ON_PATH else SNAKEMAKE


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    """Snakemake with this Snakefile in `workdir`."""
    return [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        *args,
    ]


def run_snakemake(
    argv: list[str], cwd: Path | None = None, env: dict | None = None, umask: int = -1
) -> subprocess.CompletedProcess:
    """A Snakemake command as a new process, as a user runs it."""
    env = dict(os.environ if env is None else env)
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, umask=umask)


def snakemake(
    workdir: Path, *args: str, check: bool = True, env=None, umask: int = -1
) -> subprocess.CompletedProcess:
    cmd = snakemake_command(workdir)
    res = run_snakemake([*cmd, *args], env=env, umask=umask)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join([*cmd, *args])} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        )
    return res


def command(cwd: Path, line: str, check: bool = True, env=None) -> subprocess.CompletedProcess:
    """Run a command line a message told the user to run, exactly as written, from `cwd` (where
    the user ran the command that printed it)."""
    args = shlex.split(line)
    assert args[0] == PRINTED, line
    res = run_snakemake(args, cwd=cwd, env=env)
    if check and res.returncode != 0:
        raise AssertionError(f"{line} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def suggested(workdir: Path, *args: str) -> str:
    """The command nadpipe suggests for a run started as `snakemake(workdir, ...)`."""
    return shlex.join([PRINTED, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args])


def jobs_run(console: str) -> list[tuple[str, str, int | None]]:
    """(rule, wildcards, gpu) of every job a real run executed, checkpoints included, from
    the Snakemake log its console names, else from the console. The log is Snakemake's alone;
    the console also carries what the jobs' processes write, and once, in the full suite, it
    gave a `train` job another gpu than the log of the same run (gpu=0 for all four there)."""
    log = re.search(r"^Complete log\(s\): (\S+)$", console, re.M)
    text = Path(log[1]).read_text() if log and Path(log[1]).is_file() else console
    out = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?(?:rule|checkpoint) )", text):
        head = re.search(r"^(?:local)?(?:rule|checkpoint) (\w+):", block, re.M)
        if not head:
            continue
        wild = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        gpu = re.search(r"^\s+resources: .*gpu=(\d+)", block, re.M)
        out.append((head[1], wild[1] if wild else "", int(gpu[1]) if gpu else None))
    return out


NO_JOB = ("-n", "--dry-run", "--lint", "--summary", "--list-rules", "--unlock", "--report")


def snakemake_here(
    workdir: Path, *args: str, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake ARGS` typed in `workdir`, a command that runs no job (NO_JOB: a dry run,
    --lint, --summary, --list-rules, --unlock, --report), run by Snakemake's own command line
    (snakemake.cli.main) in this process (`as_a_process`), with `env` for the environment if
    given: a dry run costs 0.2 CPU-seconds here instead of 1.6 for a new Python importing
    Snakemake (measured on the micro study)."""
    from snakemake.cli import main

    assert set(args) & set(NO_JOB), args
    command = [*snakemake_command(workdir)[1:], *args]
    res = as_a_process(lambda: main(command), [SNAKEMAKE, *command], workdir, env)
    if check and res.returncode != 0:
        raise AssertionError(
            f"snakemake {shlex.join(args)} in {workdir} failed:\n{res.stdout[-3000:]}\n"
            f"{res.stderr[-3000:]}"
        )
    return res


def planned(workdir: Path, change: dict | None = None) -> dict[str, int]:
    """Job counts of a dry run (in this process: snakemake_here), with `change` merged over the
    config as --configfile would (as an edit of that config: into its results folder);
    `trains_alone` (a cell's empty ahead file, nadpipe.batching) counted with its `train` job."""
    args = ["-n", "--cores", "1"]
    if change is not None:
        path = workdir / "change.yaml"
        path.write_text(yaml.safe_dump({"results": "results", **change}))
        args += ["--configfile", str(path)]
    out = snakemake_here(workdir, *args).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    counts.pop("all", None)
    # the empty ahead file of each cell trained alone (nadpipe.batching): one per such training
    alone = counts.pop("trains_alone", 0)
    assert alone <= counts.get("train", 0), counts
    return counts


def run_every_job(plan: Plan, out, backend: Backend, born: str | None = None) -> dict:
    """NADs of every architecture (of networks drawn on `born`, default the backend's device),
    then the first cell of every study trained and evaluated (the NAD-pair cell also as a
    two-seed ensemble); returns what they wrote."""
    found = {}
    nad = {}
    for arch in plan.nad_architectures():
        paths = [out / f"{arch}.{ext}" for ext in ("pt", "npy", "json")]
        nads_job(plan.nad_job(arch), *map(str, paths), backend=backend, born=born)
        nad[arch] = str(paths[0])
        found[f"nads {arch}"] = np.load(paths[1])
    for study in plan.cfg.enabled():
        cell = plan.cells(study)[0]
        nads = nad[plan.cfg.nad_source(cell.arch)] if plan.nad_files(study, cell.arch) else None
        base = out / f"{study}_{cell.arch}_{cell.variant}"
        model, record = f"{base}.pt", f"{base}.json"
        job = plan.train_job(study, cell.arch, cell.variant, (0,))
        inputs = [nads] if nads else []
        ahead = None
        siblings = [
            plan.train_job(study, c.arch, c.variant, (0,))
            for c in plan.cells(study)[1:]
            if (backend.batch_cells or 1) > 1 and stackable(job)
        ]
        siblings = [j for j in siblings if batch_key(j) == batch_key(job)]
        if siblings:
            # as the workflow does where cells batch: the cell and a sibling by a batch's job,
            # then the cell's own job claims its result
            sibling = siblings[0]
            ahead = f"{base}.ahead"
            train_together_job([job, sibling], nads, [ahead, f"{base}.sibling.ahead"],
                               f"{base}.batch.ckpt", backend, inputs=inputs)  # fmt: skip
        train_job(job, nads, [model], [record], backend, ahead=ahead, inputs=inputs)
        job = plan.eval_job(study, cell.arch, cell.variant, 0)
        evaluate_job(job, nads, model, record, f"{base}.parquet", f"{base}.npz", backend)
        found[f"weights {study}"] = load_torch(model)
        found[f"record {study}"] = json.load(open(record))
        found[f"rows {study}"] = pd.read_parquet(f"{base}.parquet")
        found[f"arrays {study}"] = dict(np.load(f"{base}.npz"))
    ensemble = plan.train_job("nad_pairs", "mlp", "i0_j0", (0, 1))
    outs = [str(out / f"ens{k}.pt") for k in (0, 1)], [str(out / f"ens{k}.json") for k in (0, 1)]
    train_job(ensemble, nad["mlp"], *outs, backend)
    found["weights ensemble"] = [load_torch(p) for p in outs[0]]
    return found


# A training job as the workflow's script runs it, in a process of its own, and the same on the
# stand-in accelerator (tests/standin.py, registered before the job reads its backend).
JOB = """
import pickle, sys
from nadpipe import jobs
target, args = pickle.load(open(sys.argv[1], "rb"))
getattr(jobs, target)(*args)
"""
JOB_STANDIN = f"""
import pickle, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from standin import standin
from nadpipe import jobs
target, args = pickle.load(open(sys.argv[1], "rb"))
with standin():
    getattr(jobs, target)(*args)
"""
# Prepended to it: the job kills itself with SIGKILL at the first optimizer step after it has
# written the checkpoint of epoch KILL_AFTER, i.e. in the middle of the next epoch, its weights
# already moved past the checkpoint. A real kill at a point that no timing decides (the tests
# polled the checkpoint, and a fast training could end before the kill).
KILL_AFTER = 3
KILLED_MID_EPOCH = f"""
import os, signal
from torch.optim.optimizer import register_optimizer_step_post_hook
import nadpipe.train
_save, _armed = nadpipe.train.save_torch, []


def _save_and_arm(state, path):
    _save(state, path)
    if state.get("done") == {KILL_AFTER}:
        _armed.append(path)


nadpipe.train.save_torch = _save_and_arm
register_optimizer_step_post_hook(lambda *_: _armed and os.kill(os.getpid(), signal.SIGKILL))
"""


def kill_mid_epoch(
    job, outs: tuple[list[str], list[str]], cwd: Path, backend=None, call=None
) -> str:
    """Train `job` (its outputs `outs`: models, records) in a process of its own, started in
    `cwd` on one thread with `backend` in its environment as the Snakefile hands it, until it
    kills itself in epoch KILL_AFTER + 1; returns what it said. `call`: (a function of
    nadpipe.jobs, its arguments) to run instead of train_job (a batch's job)."""
    from nadpipe.io import RUN_ENV as ENV

    args = Path(outs[0][0]).with_suffix(".args.pkl")
    args.write_bytes(pickle.dumps(call or ("train_job", (job, None, *outs))))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread, as the runs it is compared with
    if backend is not None:
        env[ENV] = backend.to_env()
    code = JOB_STANDIN if backend is not None and backend.device == "standin" else JOB
    res = subprocess.run([sys.executable, "-c", KILLED_MID_EPOCH + code, str(args)], cwd=cwd,
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert res.returncode == -signal.SIGKILL, res.stdout + res.stderr
    assert not os.path.exists(outs[0][0])  # no result written
    return res.stdout + res.stderr


MEASURED = ["accuracy", "loss", "reliance_deg", "margin_v1", "jacobian_norm_test"]


def relu_units_820f241(net: nn.Module, shape) -> int:
    """models.relu_units as it was at 820f241: zeros made without a device."""
    count = 0

    def hook(_m, _i, out):
        nonlocal count
        count += out[0].numel()

    hooks = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        net(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return count


def undeclared(df) -> list[str]:
    """The columns of a study's summary.parquet or runs.parquet that nadpipe.row does not
    declare (for that study: its variant's columns, its data settings)."""
    from nadpipe import row
    from nadpipe.studies import REGISTRY

    entry = REGISTRY[str(df["study"].iloc[0])]
    return [
        c
        for c in df.columns
        if not row.declared(c, tuple(entry.variant.COLUMNS), tuple(entry.data_keys))
    ]


def nadpipe_here(*args, cwd=None, check=True):
    """`nadpipe ARGS` as the installed script runs it (its entry point, cli.main), in this
    process (`as_a_process`): a new Python importing torch costs 1.5 CPU-seconds a command."""
    from nadpipe import cli

    res = as_a_process(lambda: cli.main(list(args)), ["nadpipe", *args], cwd)
    if check and res.returncode != 0:
        raise AssertionError(f"nadpipe {' '.join(args)}: {res.stdout}\n{res.stderr}")
    return res


def _a_tests_own(file: str | None) -> bool:
    """Whether a module's file is a test's own (a model file it wrote), not Python's, the
    venv's or this checkout's, wherever those live (a venv under the temporary folder too)."""
    if not file:
        return False
    path = Path(file).resolve()
    homes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, REPO)}
    return not any(path.is_relative_to(home) for home in homes)


def as_a_process(main, argv: list[str], cwd=None, env: dict | None = None):
    """What `main()` (a command's entry point: its exit status returned or raised as
    SystemExit) does as the command `argv` started in `cwd` with `env`, run in this process:
    its exit status, stdout and stderr, nadpipe's own log lines on stderr as in a process of its
    own (pytest's log capture set aside meanwhile). What the command sets for its process is
    put back after it: the working directory, the command line, the import path and the modules
    it imported from the temporary folder (a test's own model file), the environment (a
    Snakefile sets what its jobs read), the loggers, torch's threads, flags and random state."""
    import logging

    from nadpipe.log import LOG

    out, err = io.StringIO(), io.StringIO()
    loggers = [logging.root, *logging.Logger.manager.loggerDict.values()]
    logs = [(g, g.handlers[:], g.level, g.propagate) for g in loggers if hasattr(g, "handlers")]
    cwd_before, env_before, argv_before = os.getcwd(), dict(os.environ), sys.argv
    path, modules = list(sys.path), set(sys.modules)
    flags = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # fmt: skip
    rng = torch.random.get_rng_state()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        logging.root.handlers[:] = []
        LOG.handlers[:] = []
        sys.argv = list(argv)
        if cwd is not None:
            os.chdir(cwd)  # files named relative to it, as typed there
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main()
            except SystemExit as e:  # argparse's refusals, --help, Snakemake's exit
                code = e.code
            if code is not None and not isinstance(code, int):  # SystemExit("message")
                print(code, file=sys.stderr)
                code = 1
    finally:
        os.chdir(cwd_before)
        sys.path[:], sys.argv = path, argv_before
        for name in set(sys.modules) - modules:
            if _a_tests_own(getattr(sys.modules[name], "__file__", None)):
                del sys.modules[name]
        os.environ.clear()
        os.environ.update(env_before)
        for g, handlers, level, propagate in logs:
            g.handlers[:], g.level, g.propagate = handlers, level, propagate
        torch.set_num_threads(flags[0])
        torch.use_deterministic_algorithms(flags[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[2:4]
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags[4:]
        torch.random.set_rng_state(rng)
    return subprocess.CompletedProcess(argv, code or 0, out.getvalue(), err.getvalue())
