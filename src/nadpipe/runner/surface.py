"""Snakemake as nadpipe meets it: every read of Snakemake beyond the documented objects of a
Snakefile, in one module.

Snakemake documents `config`, `workflow.basedir`, `workflow.source_path`, the onstart / onsuccess
/ onerror handlers and the resources given on the command line or by a profile. What nadpipe
needs besides (is this the main process, do jobs run on this machine, which files and --config
values were given, which rules are forced, did Snakemake find nothing to do) has no documented
means, so it is read here and nowhere else. `probe` names what a Snakemake lacks of it:
tests/test_lint.py runs it on the installed Snakemake, tests/test_floor.py on the declared floor,
so a Snakemake that moves one of these fails a test that names it.
"""

from __future__ import annotations

import glob
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

# Snakemake's working folders a run reads: its locks, its incomplete markers, its job scripts
# (the mark of a job process), its log files
LOCKS, INCOMPLETE, SCRIPTS, LOGS = (
    os.path.join(".snakemake", d) for d in ("locks", "incomplete", "scripts", "log")
)


def probe(workflow: Any) -> list[str]:
    """What of this module the running Snakemake does not give, by name (empty: all of it);
    called from a Snakefile while Snakemake parses it (tests/test_lint.py, tests/test_floor.py).
    The job record is checked on its class: it exists once the run starts; the DAG's jobs and
    the end of a dry run by the probe's Snakefile, which prints them from on_dry_run_end."""

    def record() -> None:
        module = importlib.import_module("snakemake.persistence")
        if not any(callable(getattr(c, "cleanup_metadata", None)) for c in vars(module).values()):
            raise AttributeError("cleanup_metadata")

    def nothing() -> None:
        importlib.import_module("snakemake.common").NOTHING_TO_BE_DONE_MSG  # noqa: B018

    checks = {
        "main_process": lambda: main_process(workflow),
        "jobs_run_here": lambda: jobs_run_here(workflow),
        "deploys_software": lambda: deploys_software(workflow),
        "dry_run": lambda: dry_run(workflow),
        "config_files": lambda: config_files(workflow),
        "config_overrides": lambda: config_overrides(workflow),
        "gpu_resource": lambda: gpu_resource(workflow),
        "limit_gpu_jobs": lambda: workflow.register_resource,
        "forget_job_record": record,
        "forced": lambda: forced(["snakemake", "-R", "x", "-F"]) == {"x", "all"} or 1 / 0,
        "on_nothing_to_do": nothing,
        "cores": lambda: cores(workflow, command_line()),
        "own_rule_name": lambda: own_rule_name(workflow)("x") == "x" or 1 / 0,
        "targets": lambda: targets(["snakemake", "a", "--cores", "1"]) == ["a"] or 1 / 0,
    }
    failed = []
    for name, check in checks.items():
        try:
            check()
        except Exception:  # noqa: BLE001 -- whatever it raises, this Snakemake lacks it
            failed.append(name)
    return failed


def command_line() -> list[str]:
    """The command line of this Snakemake process, as typed."""
    return sys.argv


def main_process(workflow: Any) -> bool:
    """Not a job Snakemake started elsewhere (a SLURM job parses the workflow again)."""
    return workflow.is_main_process


def jobs_run_here(workflow: Any) -> bool:
    """Whether this command's jobs run on this machine (not a cluster executor's)."""
    return bool(workflow.local_exec)


def deploys_software(workflow: Any) -> bool:
    """Whether jobs run in environments Snakemake deploys (--software-deployment-method)."""
    return bool(workflow.deployment_settings.deployment_method)


def dry_run(workflow: Any) -> bool:
    return bool(workflow.output_settings.dryrun)


def config_files(workflow: Any) -> list[str]:
    """The --configfile files, as given (empty: config.yaml alone)."""
    return list(workflow.config_settings.configfiles or [])


def config_overrides(workflow: Any) -> dict:
    """The --config values, typed as in a file."""
    return workflow.config_settings.config


def gpu_resource(workflow: Any) -> int | None:
    """The `gpu` resource given by --resources or a profile; None when none was."""
    return workflow.global_resources.get("gpu")


def limit_gpu_jobs(workflow: Any, n: int) -> None:
    """At most n jobs that ask for `gpu` at once, where the command gave no limit."""
    workflow.register_resource("gpu", n)


def forget_job_record(workflow: Any, path: str) -> bool:
    """Drop Snakemake's record of the job that last made `path` (what --cleanup-metadata
    does); False where this Snakemake cannot."""
    try:
        # deferred: it loads snakemake, which importing surface does not
        from snakemake.io import IOFile

        workflow.persistence.cleanup_metadata(IOFile(path))
    except Exception:  # noqa: BLE001 -- another Snakemake's internals
        return False
    return True


def forced(argv: list[str]) -> frozenset[str]:
    """The rules a Snakemake command line reruns whatever their outputs (-R/--forcerun; "all"
    for -F/--forceall), read with Snakemake's own argument parser: Snakemake parses the workflow
    before it hands its DAG settings to it. Empty where `argv` is not Snakemake's (the API)."""
    # Snakemake's parser takes seconds to build: only where an option could be one of them
    # (a short option cluster holding R or F, a long option starting --f, as argparse's
    # abbreviations allow)
    maybe = any(
        a.startswith("--f")
        or (a.startswith("-") and not a.startswith("--") and set(a) & {"R", "F"})
        for a in argv[1:]
    )
    if not maybe:
        return frozenset()
    args = _parsed(argv)
    rules = {str(r) for r in (getattr(args, "forcerun", None) or ())}
    return frozenset(rules | ({"all"} if getattr(args, "forceall", False) else set()))


def targets(argv: list[str]) -> list[str]:
    """The targets a Snakemake command line asks for (files or rules; [] for the default
    target), read with Snakemake's own argument parser (seconds: only for a message that
    repeats them)."""
    return [str(t) for t in (getattr(_parsed(argv), "targets", None) or ())]


def _parsed(argv: list[str]) -> Any:
    """`argv` as Snakemake's own parser reads it; None where it is not Snakemake's."""
    # deferred: it loads snakemake, which importing surface does not
    from snakemake.cli import get_argument_parser

    try:
        return get_argument_parser().parse_known_args(argv[1:])[0]
    except (SystemExit, Exception):  # noqa: BLE001 -- not a command line Snakemake parses
        return None


def on_nothing_to_do(said: Callable[[], None]) -> None:
    """Call `said` when Snakemake logs that it has nothing to do (it then ends without calling
    the workflow's handlers)."""

    # deferred: it loads snakemake, which importing surface does not
    from snakemake.common import NOTHING_TO_BE_DONE_MSG

    class Nothing(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == NOTHING_TO_BE_DONE_MSG:
                said()

    logging.getLogger("snakemake.logging").addHandler(Nothing())  # Snakemake's logger, 9.0 on


def on_dry_run_end(said: Callable[[], None]) -> None:
    """Call `said` when a dry run with jobs to run ends (Snakemake logs that it was a dry run,
    its job table said; it calls no workflow handler in a dry run)."""

    class DryRun(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if str(record.msg).startswith(DRY_RUN_MSG):
                said()

    logging.getLogger("snakemake.logging").addHandler(DryRun())


# how Snakemake 9 ends a dry run with jobs (snakemake.workflow, not a named constant)
DRY_RUN_MSG = "This was a dry-run"


def own_rule_name(workflow: Any) -> Callable[[str], str]:
    """nadpipe's own name of a rule, from the name a workflow gives it (`use rule * from nadpipe
    as nadpipe_*` names `train` nadpipe_train), as the rules being parsed now are renamed."""
    head, _, tail = workflow.modifier.modify_rulename("\0").partition("\0")

    def own(name: str) -> str:
        inside = len(name) > len(head) + len(tail)
        if inside and name.startswith(head) and name.endswith(tail):
            return name[len(head) : len(name) - len(tail)]
        return name

    return own


def planned_jobs(workflow: Any, own: Callable[[str], str]) -> list[tuple[str, dict]]:
    """The jobs a dry run's DAG holds to run: (rule by its `own` name, wildcards)."""
    dag = workflow.dag
    jobs = set(dag.needrun_jobs(exclude_finished=False)) | set(dag.finished_jobs)
    return sorted(
        ((own(j.rule.name), dict(j.wildcards_dict)) for j in jobs),
        key=lambda job: (job[0], sorted(job[1].items())),
    )


def jobs_done(workflow: Any, own: Callable[[str], str]) -> list[tuple[str, dict, str | None]]:
    """The jobs this run finished: (rule by its `own` name, wildcards, its log or None)."""
    return [
        (own(j.rule.name), dict(j.wildcards_dict), str(j.log[0]) if j.log else None)
        for j in workflow.dag.finished_jobs
    ]


def cores(workflow: Any, argv: list[str]) -> int:
    """The cores this command (`argv`) gives its jobs: --cores (or a profile's); where a dry
    run gave none (Snakemake then plans with 1), this machine's, as the run it previews would
    take with `--cores all`."""
    given = any(
        a.split("=")[0] in ("--cores", "--jobs", "-c", "-j") or a[:2] in ("-c", "-j")
        for a in argv[1:]
    )
    cores = getattr(workflow.resource_settings, "cores", None)
    return int(cores if given and cores else os.cpu_count() or 1)


def run_logs_since(born: float) -> list[str]:
    """Snakemake's log files written to since `born` (its documentation names the folder:
    "Complete log: .snakemake/log/..."), the first made first."""
    made = [
        p for p in glob.glob(os.path.join(LOGS, "*.snakemake.log")) if os.path.getmtime(p) >= born
    ]
    return sorted(made, key=os.path.getctime)


def lock_files(root: str = ".") -> list[str]:
    return glob.glob(os.path.join(root, LOCKS, "*.lock"))


def has_incomplete(root: str = ".") -> bool:
    return bool(glob.glob(os.path.join(root, INCOMPLETE, "*")))
