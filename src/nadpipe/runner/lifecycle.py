"""The start and the end of a workflow run, for nadpipe.runner.command.Command.

One run at a time per results folder: a run holds its folder's run lock (nadpipe.paths.RUN_LOCK,
flock) from Snakemake's onstart to its end, and every other Snakemake command of a config with
the same results folder stops at once while it does, saying which run is going on (Snakemake
itself would report that run's unfinished outputs as incomplete and advise --rerun-incomplete, or
--unlock, both wrong while it runs). Commands of configs with other results folders go on beside
it: everything a run writes (results, logs, benchmarks, its lock) lies in its own folder. Checking
only reads the lock. At the end: the outputs, what they show, and every warning the run's jobs
wrote to their logs.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Callable

from .. import provenance
from ..io import rebuild_command, snakemake_command
from ..log import WARNING, fold
from ..paths import AHEAD, KEPT, LOGS, OWNER, RUN_LOCK, at
from . import surface

# options that say which run this is, repeated in every command nadpipe suggests (a command
# without them could plan another config's study in the same directory); those marked take
# every token up to the next option, as Snakemake's own parser does
REPEATED = {"-s", "--snakefile", "-d", "--directory", "--profile", "--workflow-profile"}
REPEATED_MANY = {"--configfile", "--configfiles", "--config", "-C"}

_held = None  # this process's open lock file, kept until it ends


class RunInProgress(RuntimeError):
    """Another Snakemake run is executing jobs that write this command's results folder."""


class CommandRefused(RuntimeError):
    """A command nadpipe refuses before any work (the message says why): several --config, or
    a results folder that another config file's runs wrote."""


def in_progress(holder: str, results: str) -> RunInProgress:
    return RunInProgress(
        f"another run is executing jobs that write {results}/, this command's results folder "
        f"({holder}); it holds {at(RUN_LOCK, results)}. Until it ends, its files there are "
        f"half-made: a command that builds or reads them now would build them twice or read "
        f"them unfinished. Wait for it to end (its jobs' logs are under {at(LOGS, results)}/), "
        "then run your command again: it picks up where that run stopped. A config with "
        "another results folder (the key `results`) runs beside it."
    )


def owner_message(results: str, configfiles: list[str], root: str = ".") -> str | None:
    """Why this command may not write the results folder `results`, which it derived from its
    config files' names (no `results` key): another config file's runs wrote it (a/x.yaml and
    b/x.yaml both name results-x). None when the folder is new or this config's own."""
    path = os.path.normpath(os.path.join(root, at(OWNER, results)))
    try:
        with open(path) as f:
            owners = [line.strip() for line in f if line.strip()]
    except OSError:
        return None
    mine = owner_names(configfiles, root)
    if owners == mine:
        return None
    return (
        f"{results}/ holds the results of {' + '.join(owners)}, and this command's config "
        f"({' + '.join(mine)}) would write the same folder, since its name comes from the config "
        f"file's name. Give this config a results folder of its own (the key `results`, e.g. "
        f"`results: {results}-2` in it, or `--config results={results}-2`); if it is the same "
        f"config moved, delete {path} and run again."
    )


def owner_names(configfiles: list[str], root: str = ".") -> list[str]:
    """The config files of a command (absolute), config.yaml in `root` when none is given."""
    return [os.path.realpath(os.path.join(root, f)) for f in configfiles or ["config.yaml"]]


def write_owner(results: str, configfiles: list[str], root: str = ".") -> None:
    """Record which config files write the results folder `results` (owner_message)."""
    path = os.path.join(root, at(OWNER, results))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(owner_names(configfiles, root)) + "\n")


def repeated_config(argv: list[str]) -> str | None:
    """Why a command line with several --config options is refused: Snakemake keeps the values
    of the last one alone and drops the others without a word. None with one or none."""
    given = [a for a in argv[1:] if a in ("--config", "-C") or a.startswith("--config=")]
    if len(given) < 2:
        return None
    return (
        f"--config is given {len(given)} times; Snakemake would keep the values of the last "
        "alone and drop the others without a word. Give every override after one --config, "
        "separated by spaces: --config a=1 b=2"
    )


def run_options(argv: list[str]) -> list[str]:
    """The options of a Snakemake command line `argv` that say which run it is: the Snakefile,
    the directory, config files and `--config` overrides, profiles (as typed)."""
    out, i = [], 1
    while i < len(argv):
        token = argv[i]
        name, has_value = token.split("=", 1)[0], "=" in token and token.startswith("--")
        i += 1
        if name not in REPEATED | REPEATED_MANY:
            continue
        out.append(token)
        if has_value:
            continue
        if name in REPEATED_MANY:
            while i < len(argv) and not argv[i].startswith("-"):
                out.append(argv[i])
                i += 1
        elif i < len(argv):
            out.append(argv[i])
            i += 1
    return out


def take_lock(results: str = "results", argv: list[str] | None = None) -> str:
    """Hold the run lock of the results folder `results` (flock) for this process's lifetime;
    the kernel releases it however the process ends. Raise RunInProgress naming the holder when
    another process has it. Returns what the last holder wrote into it (its pid, start and
    command line)."""
    global _held
    path = at(RUN_LOCK, results)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    f = open(path, "a+")  # noqa: SIM115 -- held until the process ends
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "a process"
        f.close()
        raise in_progress(holder, results) from None
    f.seek(0)
    last = f.read().strip()
    f.seek(0)
    f.truncate()
    argv = surface.command_line() if argv is None else argv
    f.write(
        f"snakemake pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: "
        f"{' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))}\n"
    )
    f.flush()
    _held = f
    return last


def orphans(root: str = ".", results: str = "results") -> list[int]:
    """Processes still running jobs of an earlier run in `root` (their job script under its
    .snakemake/scripts, or the warm job server of the results folder `results`), this process
    excepted."""
    # deferred: it loads psutil, which importing runs does not
    import psutil

    marks = [
        os.path.join(os.path.abspath(root), d)
        for d in (surface.SCRIPTS, os.path.join(results, ".nadpipe"))
    ]
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if p.info["pid"] != os.getpid() and any(m in line for m in marks):
            found.append(p.info["pid"])
    return sorted(found)


def locks_of(results: str, root: str = ".") -> list[str]:
    """Snakemake's lock files in `root` that name a file of the results folder `results` (a
    run of another results folder locks only its own files, and its locks are none of ours)."""
    folder = os.path.join(os.path.realpath(root), results, "")
    out = []
    for path in surface.lock_files(root):
        with contextlib.suppress(OSError), open(path) as f:
            names = [os.path.join(os.path.realpath(root), n.strip()) for n in f if n.strip()]
        if any(os.path.normpath(n).startswith(folder) for n in names):
            out.append(path)
    return out


def killed_run_message(
    last: str, root: str = ".", results: str = "results", argv: list[str] | None = None
) -> str | None:
    """What to do after a run of the results folder `results` in `root` was killed (its
    Snakemake lock left behind), in one message: the steps Snakemake will ask for one after
    another (for the targets of this command, `argv`), and the killed run's jobs that are still
    running; None when no run was killed."""

    if not locks_of(results, root):
        return None
    starting = snakemakes(root)
    if starting:  # its locks, taken before nadpipe's
        raise in_progress(f"snakemake pid {starting[0]}, starting", results)
    steps = [snakemake_command("--unlock")]
    asked = surface.targets(argv) if argv else []  # what this command asked for, kept
    if surface.has_incomplete(root):
        steps.append(snakemake_command(*asked, "--cores", "all", "--rerun-incomplete"))
    else:
        steps.append(snakemake_command(*asked, "--cores", "all"))
    alive = orphans(root, results)
    if alive:
        pids = " ".join(map(str, alive))
        jobs = (
            f"{len(alive)} process(es) of its jobs are still running (pids {pids}) and would "
            f"write the same files as a new run: wait for them to end, or stop them with "
            f"`kill {pids}`; then "
        )
    else:
        jobs = "none of its jobs is still running; "
    return (
        f"the last run that wrote {results}/ was killed ({last or 'no record of it'}) and "
        f"left Snakemake's lock behind, which stops every run of it until it is unlocked. "
        f"{jobs[0].upper()}{jobs[1:]}run "
        f"`{steps[0]}`, then `{steps[1]}` (trainings resume from their checkpoints)."
    )


def holder(path: str) -> tuple[str | None, str]:
    """Who holds `path` now (what it wrote: pid, start, command line; None when no process
    does), and what its last holder wrote. Only reads: no file is made, nothing is locked for
    longer than the test."""
    try:
        f = open(path)  # noqa: SIM115 -- closed below
    except FileNotFoundError:
        return None, ""
    with f:
        text = f.read().strip()
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return text or "a process", text
        fcntl.flock(f, fcntl.LOCK_UN)
    return None, text


def snakemakes(root: str = ".") -> list[int]:
    """Other Snakemake processes working in `root` (not their jobs): a run that is building its
    plan has taken Snakemake's locks but not yet nadpipe's. This command's own process and its
    parents are not others: a wrapper (`timeout 900 snakemake ...`, `nice snakemake ...`) names
    snakemake on its command line too."""
    # deferred: it loads psutil, which importing runs does not
    import psutil

    own = {os.getpid()} | {p.pid for p in psutil.Process().parents()}
    here, found = os.path.realpath(root), []
    for p in psutil.process_iter(["pid", "cmdline"]):
        line = p.info["cmdline"] or []
        if p.info["pid"] in own or not _is_snakemake(line):
            continue
        with contextlib.suppress(psutil.Error):
            if os.path.realpath(p.cwd()) == here:
                found.append(p.info["pid"])
    return sorted(found)


def _is_snakemake(cmdline: list[str]) -> bool:
    program = [os.path.basename(a) for a in cmdline[:3]]
    return "snakemake" in program or any(
        a == "-m" and b == "snakemake" for a, b in zip(cmdline, cmdline[1:], strict=False)
    )


def check(results: str = "results", root: str = ".", argv: list[str] | None = None) -> list[str]:
    """The checks of every Snakemake command in `root` (its command line `argv`), as it parses
    the workflow: raise RunInProgress while another run executes jobs that write the results
    folder `results`; return the warnings to print (a killed run's left-overs, results made by
    other library source). Only reads."""
    held, last = holder(os.path.join(root, at(RUN_LOCK, results)))
    if held is not None:
        raise in_progress(held, results)
    killed = killed_run_message(last, root, results, argv)
    message = provenance.stale_message(provenance.stale(results))
    return [m for m in (killed, message) if m]


def _logs_since(since: float, root: str) -> list[str]:
    """The job logs under `root` (a results folder's logs) written since `since`, in order."""
    logs = glob.glob(os.path.join(glob.escape(root), "**", "*.log"), recursive=True)
    return [path for path in sorted(logs) if os.path.getmtime(path) >= since]


def _failed_logs_since(since: float, root: str) -> bool:
    """Whether a job's log under `root` (a results folder's logs) written since `since` holds a
    failure's traceback (every job writes one there when it fails: nadpipe.runner.worker)."""
    for path in _logs_since(since, root):
        with open(path, errors="replace") as f:
            if "Traceback (most recent call last)" in f.read():
                return True
    return False


def job_warnings(since: float, root: str) -> list[str]:
    """The warning lines of the job logs under `root` (a results folder's logs) written since
    `since` (this run's jobs)."""
    out = []
    for path in _logs_since(since, root):
        with open(path, errors="replace") as f:
            for line in f:
                if WARNING in line:
                    shown = os.path.relpath(path)  # as the user's results folder names it
                    out.append(f"{line.split(WARNING, 1)[1].strip()} ({shown})")
    return list(dict.fromkeys(out))


REPORT = "The report (figures, tables, the config that ran): {command}"


def remove_leftovers(results: str) -> None:
    """At a run's end, the results trained ahead that no job claimed (a batch holds a cell the
    plan foresaw stale and Snakemake did not rerun; a claim that failed): they serve no later
    run, which plans its batches anew."""
    folder = at(AHEAD, results).split("{", 1)[0]
    shutil.rmtree(folder, ignore_errors=True)


def restore_kept(results: str) -> list[str]:
    """At the end of a failed run, put back the last good NADs (nadpipe.io.keep) whose job
    failed and so lost them: Snakemake deletes a failed job's outputs, and a merge that fails
    on a damaged shard would take a day of networks with it. They keep their old time, so the
    next run remakes them from the newer shards. The files put back."""
    kept, out = at(KEPT, results), []
    for path in sorted(glob.glob(os.path.join(glob.escape(kept), "**", "*"), recursive=True)):
        to = os.path.join(results, os.path.relpath(path, kept))
        if os.path.isfile(path) and not os.path.exists(to):
            with contextlib.suppress(OSError):
                os.link(path, to)
                out.append(to)
    return out


def put_back_message(back: list[str], inputs: Callable[[str], list[str]]) -> str:
    """What a failed run says of the NADs it put back (`restore_kept`): remade by the next run
    where they are older than an input of theirs (`inputs(path)`, the shards the plan merges
    into them); else as they were, kept by the next run (a forced merge that failed), with
    the command that remakes them once the cause is fixed."""
    said = "the NADs made before were put back, since the job that remade them failed"

    def older(path: str) -> bool:
        made = os.path.getmtime(path)
        return any(os.path.exists(i) and os.path.getmtime(i) > made for i in inputs(path))

    if all(older(p) for p in back):
        return f"{said} (older than their inputs, so the next run remakes them): {', '.join(back)}"
    return (
        f"{said}: {', '.join(back)}; they are as before this run, and the next run keeps them; "
        f"once what failed is mended, remake them with: {rebuild_command(back[0])}"
    )


Findings = Callable[[list[str]], list[str]]  # what the summaries among outputs show (the plan's)


def _results_lines(outputs: list[str], results: str, findings: Findings) -> list[str]:
    """What a run whose results stand says after listing them: what they show, and the
    command that makes their report."""
    found = findings(outputs)
    shown = ["What the results show:", *(f"  - {f}" for f in found)] if found else []
    return [*shown, REPORT.format(command=report_command(results))]


def report_command(results: str = "results") -> str:
    """The command that makes this run's HTML report, in its results folder: its own options
    (config files, overrides, directory), so that the report is of the results this run made."""

    return snakemake_command("--report", f"{results}/report.html")


def end(
    ok: bool,
    outputs: list[str],
    warnings: list[str],
    since: float,
    results: str = "results",
    findings: Findings = lambda outputs: [],
) -> str:
    """What the run says when it ends: its outputs (or that it failed) and every warning."""
    lines = []
    if ok:
        lines.append("nadpipe finished. Results:\n  " + "\n  ".join(outputs))
        lines += _results_lines(outputs, results, findings)
    elif _failed_logs_since(since, at(LOGS, results)):
        lines.append("nadpipe stopped: a job failed (its log is named above).")
    else:  # e.g. a cluster executor that reached no scheduler: no job started
        lines.append(
            "nadpipe stopped: no job's log holds an error, so Snakemake itself failed (a "
            "cluster it could not reach, a job it could not start) or a job was killed; "
            "Snakemake's error above says which."
        )
    found = list(dict.fromkeys([*warnings, *job_warnings(since, at(LOGS, results))]))
    if found:
        lines.append(f"Warnings of this run ({len(found)}):")
        lines += [f"  - {w}" for w in fold(found)]
    return "\n".join(lines)


def damaged(outputs: list[str], results: str = "results") -> list[str]:
    """The results a run that has nothing to do would stand on but that cannot be read (a
    file cut short or overwritten that kept its time, which Snakemake cannot see): the final
    summaries (their parquet footer), the evaluations' arrays and every torch file (a zip's
    directory; a NAD shard's range too), the NADs' arrays (size against header) and the resolved
    config (YAML). Reads headers only: cheap for a large grid."""

    # deferred: they load pyarrow and yaml, which importing runs does not
    import pyarrow.parquet as pq
    import yaml

    bad = []
    for path in outputs:
        if path.endswith(".parquet") and os.path.isfile(path):
            try:
                pq.read_metadata(path)
            except Exception:  # noqa: BLE001 -- a damaged file fails in any of pyarrow's layers
                bad.append(path)
    for path in sorted(glob.glob(os.path.join(glob.escape(results), "*", "eval", "*", "*.npz"))):
        if not zipfile.is_zipfile(path):
            bad.append(path)
    # every torch file a later job reads (models, NADs, NAD shards): a zip's directory
    for path in sorted(glob.glob(os.path.join(glob.escape(results), "**", "*.pt"), recursive=True)):
        if not zipfile.is_zipfile(path):
            bad.append(path)
        elif os.sep + os.path.join("nads", "shards") + os.sep in path and not _shard_named(path):
            bad.append(path)
    for path in sorted(glob.glob(os.path.join(glob.escape(results), "nads", "*.npy"))):
        if not _npy_whole(path):
            bad.append(path)
    for path in sorted(glob.glob(os.path.join(glob.escape(results), "nads", "*.json"))):
        try:
            with open(path) as f:
                json.load(f)
        except (ValueError, UnicodeDecodeError):
            bad.append(path)
    config = os.path.join(results, "config.yaml")
    if os.path.isfile(config):
        try:
            with open(config) as f:
                ok = isinstance(yaml.safe_load(f), dict)
        except (yaml.YAMLError, UnicodeDecodeError):
            ok = False
        if not ok:
            bad.append(config)
    return bad


def _shard_named(path: str) -> bool:
    """Whether the NAD shard at `path` (a whole zip) holds the networks its name says, FIRST-STOP
    (another range's shard copied over it keeps the name and may keep the time)."""
    # deferred: it loads torch, which importing runs does not
    import torch

    first, stop = os.path.basename(path)[: -len(".pt")].split("-")
    try:  # memory-mapped: the sensitivities are not read
        shard = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        return (shard["first"], shard["stop"]) == (int(first), int(stop))
    except Exception:  # noqa: BLE001 -- a damaged file fails in any of torch's layers
        return False


def _npy_whole(path: str) -> bool:
    """Whether the .npy file at `path` holds as many bytes as its header says."""
    # deferred: it loads numpy, which importing runs does not
    import numpy as np

    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0}.get(
                version, np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(f)
            need = f.tell() + int(np.prod(shape)) * dtype.itemsize
        return os.path.getsize(path) == need
    except Exception:  # noqa: BLE001 -- any damage
        return False


def damaged_message(bad: list[str]) -> str:
    command = snakemake_command("--cores", "all", "--forcerun", *bad)
    return (
        f"nadpipe: Snakemake finds every result up to date, but {len(bad)} file(s) they stand "
        f"on cannot be read (cut short or overwritten, with their old time): "
        f"{', '.join(bad)}. Remake them and what was made from them with: {command}"
    )


def up_to_date(
    outputs: list[str],
    warnings: list[str],
    results: str = "results",
    findings: Findings = lambda outputs: [],
) -> str:
    """What a run says when every result was already up to date (Snakemake then ends without
    calling the workflow's handlers): the results, and the warnings that stand for them (in the
    logs of the jobs that made them)."""
    lines = ["nadpipe: nothing to do, every result is up to date:\n  " + "\n  ".join(outputs)]
    lines += _results_lines(outputs, results, findings)
    found = list(dict.fromkeys([*warnings, *job_warnings(0.0, at(LOGS, results))]))
    if found:
        lines.append(f"Warnings that stand for these results ({len(found)}):")
        lines += [f"  - {w}" for w in found]
    return "\n".join(lines)


def summarise_at_exit(
    outputs: Callable[[], list[str]],
    warnings: list[str],
    ended: Callable[[], bool],
    results: str = "results",
    findings: Findings = lambda outputs: [],
) -> None:
    """When this run ends without its end-of-run summary because Snakemake found nothing to do
    (it said so through its logger), say `up_to_date` on stderr and in Snakemake's log file.
    A run that ends otherwise before any job (Snakemake's lock held by a killed run, an error
    of its own) gets no line from nadpipe: Snakemake's message is the last word."""

    here = os.getcwd()  # Snakemake may have left the working directory by then
    # now, while Snakemake parses: its log of this run is written to after this (psutil's
    # process start time is read against whole-second boot time, up to a second early, and
    # once picked the log of the run before, when that one ended within the second)
    born = time.time()
    said = []

    surface.on_nothing_to_do(lambda: said.append(True))

    def at_exit() -> None:
        if ended() or not said:  # b879b52 said "nothing to do" after a LockException too
            return
        with contextlib.chdir(here):
            finals = outputs()  # planned once, for both
            bad = damaged(finals, results)
            if bad:  # no result stands on them: said, and the exit status says so
                print(damaged_message(bad), file=sys.stderr, flush=True)
                os._exit(1)
            if not all(os.path.exists(f) for f in finals):
                return  # Snakemake's targets were others (a module's default rule): no claim
            text = up_to_date(finals, warnings, results, findings)
            print(text, file=sys.stderr, flush=True)
            # Snakemake's log file of this run: the first written to since this run parsed
            for path in surface.run_logs_since(born)[:1]:
                with contextlib.suppress(OSError), open(path, "a") as f:
                    f.write(text + "\n")

    atexit.register(at_exit)
