"""One Snakemake command of the workflow: what it does besides its jobs.

`Command` is the run machinery's one entry point, made once by common.smk while Snakemake
parses the workflow (so this module, unlike the worker, may import Snakemake):
- parsing (every Snakemake command: a run, -n, --report, --lint, --unlock, --summary, a
  profile's calls) only reads and plans: it stops the command while another run executes jobs
  that write its results folder (lifecycle.check), or when that folder is another config file's,
  or --config is repeated; it plans the GPU slot pool (slots), says whether the compute jobs
  find a GPU (`accelerated`: the plan decides from it which cells train together,
  nadpipe.batching) and hands the jobs what they need of the run in one environment variable
  (nadpipe.io.RUN_ENV); what the main process planned reaches the jobs Snakemake starts
  elsewhere (SLURM), which parse the workflow again, through `shared`;
- what it reads of Snakemake beyond a Snakefile's documented objects, it reads through
  `surface`, and nowhere else;
- `start`, Snakemake's onstart, which only a run that executes jobs reaches: takes the run lock
  of its results folder and records the config files that write it, writes what is `shared`,
  remembers the model checks that passed (nadpipe.verdicts), starts the warm job server
  (worker);
- `end`, Snakemake's onsuccess / onerror, and the "nothing to do" summary of a run that had no
  job: the outputs, what they show, every warning.
So no list of Snakemake's options says which commands run jobs: Snakemake's hooks do. The
science reaches it only through what the workflow hands it: the plan (`final_outputs`,
`findings`), a pricer (`line`, `record`: nadpipe.pricing) and the warm server's start
(nadpipe.jobtable.start_server). It imports none of grid, studies, jobs or train.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from snakemake.logging import logger

from .. import provenance, threads, verdicts
from ..backend import CUBLAS_WORKSPACE
from ..config import ConfigError
from ..io import (
    forget_run_values,
    load_json,
    program,
    run_values,
    save_json,
    set_run_values,
)
from ..log import WARNING
from ..paths import BATCHES, at
from . import lifecycle, slots, surface
from .lifecycle import CommandRefused, RunInProgress


@contextlib.contextmanager
def refusals():
    """Around what the workflow checks while Snakemake parses it: a refusal (a config that
    cannot mean anything, a run going on, a command refused) is said in its own words and ends
    the command with status 1, without the traceback lines Snakemake adds to an error raised in
    a workflow file (they say where nadpipe checked, not what to change)."""
    try:
        yield
    except (ConfigError, CommandRefused, RunInProgress) as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


class Command:
    """One Snakemake command of the workflow. `workflow` is Snakemake's; `cfg` the validated
    config, `plan` its plan (grid.Plan: its final outputs and findings), `results` its results
    folder, `warnings` what the config check found (said now and again at the end); `pricer`
    prices the jobs (nadpipe.pricing.Pricer), `serve(directory)` starts the warm job server
    (nadpipe.jobtable.start_server)."""

    def __init__(
        self,
        workflow: Any,
        cfg: Any,
        plan: Any,
        results: str,
        warnings: list[str],
        pricer: Any,
        serve: Callable[[str], Any],
    ):
        self.plan, self.results, self.warnings, self.cfg = plan, results, warnings, cfg
        self.pricer, self.serve = pricer, serve
        self.workflow = workflow
        self.argv = surface.command_line()  # read once, here; handed to what needs it
        self.since = time.time()
        self._shared: list[str] = []  # the files written for the jobs, removed at the end
        self.server = None  # the warm job server (worker), from start() to end()
        self.ended = False
        self.warm = not surface.deploys_software(workflow)  # jobs run here
        self.main = surface.main_process(workflow)  # not a job started elsewhere (SLURM)
        self.own_name = surface.own_rule_name(workflow)  # as nadpipe's rules are named now
        if self.main:  # the values this run sets for its jobs, and no earlier run's
            forget_run_values()
        # the config files whose name gave the results folder (None: the `results` key did)
        self.owners = None if cfg.results is not None else surface.config_files(workflow)
        if self.main:
            self._check_command()
        for message in self.warnings:
            logger.warning(f"{WARNING} {message}")

        self._plan_gpus(cfg)
        # what the jobs need of this run, in one variable (nadpipe.io.RUN_ENV)
        set_run_values(
            slots=self.slots,
            lock_dir=os.path.abspath(cfg.gpus.lock_dir),
            backend=asdict(cfg.gpus.backend()),
            repo=str(os.path.realpath(workflow.basedir)),  # documented: the Snakefile's folder
            study_modules=list(cfg.study_modules),
        )
        if cfg.gpus.deterministic:  # cuBLAS reads its own variable when it starts
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        if self.main and self.slots:
            logger.info(f"nadpipe: {slots.describe(self.slots)}")
        if self.main and threads.said():  # the user's own OpenMP settings, left alone
            logger.info(f"nadpipe: {threads.said()}")

    def _check_command(self) -> None:
        """What the main process checks of its command before any job: --config repeated, a
        run going on, a results folder of another config; the run's options for the commands
        the jobs suggest; the run's end (or, for a dry run, its price) hooked up."""
        argv = self.argv
        refused = lifecycle.repeated_config(argv)
        if refused:
            raise lifecycle.CommandRefused(refused)
        # every command nadpipe suggests, in the jobs too, repeats the run's own options
        set_run_values(options=lifecycle.run_options(argv), program=program("snakemake", argv[0]))
        self.warnings += lifecycle.check(self.results, argv=argv)
        refused = self.owners is not None and lifecycle.owner_message(self.results, self.owners)
        if refused:
            raise lifecycle.CommandRefused(refused)
        if not surface.dry_run(self.workflow):
            lifecycle.summarise_at_exit(
                self.plan.final_outputs,
                self.warnings,
                lambda: self.ended,
                self.results,
                self.plan.findings,
            )
        else:  # its last line: what the run would cost here (nadpipe.cost)
            surface.on_dry_run_end(lambda: logger.info(self.cost()))

    def _plan_gpus(self, cfg: Any) -> None:
        """Where jobs compute (nadpipe.backend) and the GPU slot pool of this machine's jobs,
        passed through the environment so that changing them reruns nothing. Only jobs that
        run here share a pool: under a cluster executor each job has the GPUs its scheduler
        gave it, and the GPUs of the machine that submits say nothing of them."""
        self.local = surface.jobs_run_here(self.workflow)
        here = cfg.gpus.device != "cpu" and self.local
        gpus = slots.visible_gpus() if here else []
        if cfg.gpus.device == "cuda" and self.local and not gpus and self.main:
            said = (
                "config key 'gpus.device' is cuda, but this machine shows no GPU: every job "
                "that computes would fail on it; use gpus.device auto (or cpu) here, or a "
                "cluster executor whose nodes have GPUs"
            )
            self.warnings.append(said)
            logger.warning(f"{WARNING} {said}")
        resource = surface.gpu_resource(self.workflow)
        self.slots = slots.pool(
            slots.slot_count(cfg.gpus.slots, resource, len(gpus), cfg.gpus.jobs_per_gpu), gpus
        )
        if self.slots and resource is None:
            # without --resources gpu=N: at most one GPU job per slot at once
            surface.limit_gpu_jobs(self.workflow, len(self.slots))
        # the gpu resource of a compute job: none with gpus.device cpu (SLURM then asks none)
        self.gpu_job = 0 if cfg.gpus.device == "cpu" else 1
        # the one fact the plan's batches need of the run: do its compute jobs find a GPU
        self.accelerated = bool(self.gpu_job) and (bool(self.slots) or not self.local)

    def cost(self) -> str:
        """What this dry run's jobs would cost on this machine (the plan prices them); an
        estimate that fails says so in one line and leaves the dry run as it was."""
        try:
            jobs = surface.planned_jobs(self.workflow, self.own_name)
            elsewhere = self.accelerated or not self.local
            return self.pricer.line(jobs, surface.cores(self.workflow, self.argv), elsewhere)
        except Exception as e:  # noqa: BLE001 -- the dry run said what it had to say
            return f"nadpipe: no cost estimate ({type(e).__name__}: {e})"

    def forced(self) -> frozenset[str]:
        """The rules this command reruns whatever their outputs (--forcerun, -R; "all" for
        -F): from its command line, as Snakemake reads it."""
        return surface.forced(self.argv) if self.main else frozenset()

    def nad_code(self) -> dict:
        """What computes this run's NADs besides their job spec: nadpipe's source, torch, the
        backend and whether the jobs run on an accelerator (rule nad_code)."""
        return {
            "nadpipe": provenance.source_hash(),
            "torch": provenance.torch_version(),
            "backend": {
                k: v for k, v in asdict(self.cfg.gpus.backend()).items() if k != "batch_cells"
            },  # fmt: skip
            "accelerated": self.accelerated,
        }

    def shared(self, name: str, make: Any) -> Any:
        """What the main process plans as `make()` and the jobs Snakemake starts elsewhere (a
        SLURM job parses the workflow again, later, with other files on disk) must see the same
        (the batches: rules they run by name). Made here and, unless it is empty or this is a
        dry run, written before any job, under its digest (no other command's file is ever
        replaced), its path in the run's values as `name`; read from there in those jobs (None
        when none). Written as the workflow is parsed, not at Snakemake's onstart, which a
        module's workflow never runs: so --lint or --report of a run with batches writes it
        too (Snakemake tells a workflow nothing else of such a command)."""
        if not self.main:
            path = run_values().get(name)
            return None if path is None else load_json(path)
        value = make()
        if value and not surface.dry_run(self.workflow):  # none: nothing for a job to read
            text = json.dumps(value, sort_keys=True)
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            path = os.path.abspath(at(BATCHES, self.results).replace("{digest}", digest))
            if not os.path.exists(path):
                save_json(value, path)
            set_run_values(**{name: path})
            self._shared.append(path)
        return value

    def start(self) -> None:
        """Snakemake's onstart: this command executes jobs. Hold the run lock, remember the
        model checks that passed, start the warm job server. (What the jobs share is written
        as the workflow is parsed: `shared`.)"""

        lifecycle.take_lock(self.results, self.argv)
        if self.owners is not None:
            lifecycle.write_owner(self.results, self.owners)
        verdicts.remember()
        if self.warm and os.environ.get("NADPIPE_NO_WORKER") != "1":
            self.server = self.serve(os.path.join(self.results, ".nadpipe"))

    def end(self, ok: bool) -> None:
        """Snakemake's onsuccess (`ok`) / onerror: say what the run says last."""
        self.ended = True
        if self.server is not None:
            self.server.terminate()
        with contextlib.suppress(Exception):  # a record the next estimate reads, never a failure
            self.pricer.record(surface.jobs_done(self.workflow, self.own_name))
        lifecycle.remove_leftovers(self.results)
        for path in self._shared:  # this run's alone: a later run plans its own
            with contextlib.suppress(OSError):
                os.unlink(path)
        back = [] if ok else lifecycle.restore_kept(self.results)
        for path in list(back):
            # Snakemake recorded the failed job's inputs and params for these outputs: without
            # that record, their old time against the newer inputs says they are to be remade;
            # where it cannot be dropped they would pass as current, so they go again
            if not surface.forget_job_record(self.workflow, path):
                os.unlink(path)
                back.remove(path)
        if back:
            arch = lambda path: os.path.basename(path).split(".")[0]  # noqa: E731 -- NAD
            self.warnings.append(
                lifecycle.put_back_message(back, lambda p: self.plan.nad_shards(arch(p)))
            )
        outputs = self.plan.final_outputs()
        logger.info(
            lifecycle.end(ok, outputs, self.warnings, self.since, self.results, self.plan.findings)
        )
