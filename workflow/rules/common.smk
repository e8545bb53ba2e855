# Shared by all stages: the validated config and its plan (nadpipe.config, nadpipe.grid), the
# start-of-run checks, wildcard constraints and input functions. The grid logic lives in
# nadpipe.grid, where the tests can import it.
import os
import time
from pathlib import Path

from snakemake.logging import logger

from nadpipe import config as nc
from nadpipe import grid as ng
from nadpipe import io as nio
from nadpipe import backend, batches, runs, slots
from nadpipe.log import WARNING
from nadpipe.settings import plain
from nadpipe.studies import REGISTRY, VARIANT_PATTERN

RUN_START = time.time()
CFG, WARNINGS = nc.load_config(
    config,
    workflow.source_path("../schemas/config.schema.yaml"),
    workflow.config_settings.config,  # --config values, typed as in a file
)
# every result under one folder per config file (nadpipe.config.results_root)
R = nc.results_root(CFG, workflow.config_settings.configfiles)
PLAN = ng.Plan(CFG, R)
if workflow.is_main_process:  # not in a job Snakemake starts elsewhere (SLURM)
    WARNINGS += runs.start(
        workflow.output_settings.dryrun,
        warm=not workflow.deployment_settings.deployment_method,  # jobs in this environment
        results=R,
    )
    if runs.executing(workflow.output_settings.dryrun):
        runs.summarise_at_exit(
            PLAN.final_outputs, WARNINGS, workflow.logger_manager.get_logfile, R
        )
for message in WARNINGS:
    logger.warning(f"{WARNING} {message}")

# Where jobs compute (nadpipe.backend) and the GPU slot pool of this machine's jobs
# (nadpipe.slots), passed through the environment so that changing them reruns nothing.
GPUS = slots.visible_gpus() if CFG.gpus.device != "cpu" else []
SLOTS = slots.pool(
    slots.slot_count(
        CFG.gpus.slots,
        workflow.global_resources.get("gpu"),
        len(GPUS),
        CFG.gpus.jobs_per_gpu,
    ),
    GPUS,
)
if SLOTS and workflow.global_resources.get("gpu") is None:
    # without --resources gpu=N: at most one GPU job per slot at once
    workflow.register_resource("gpu", len(SLOTS))
# the gpu resource of a compute job: none with gpus.device cpu (SLURM then asks no --gpus)
GPU_JOB = 0 if CFG.gpus.device == "cpu" else 1
# grid cells trained together (nadpipe.batches): planned here, so that a chunk's other cells
# run after its leader (their input is its record) and ask for no GPU
BATCH = CFG.gpus.backend().batch_size(
    bool(GPU_JOB) and (bool(SLOTS) or not workflow.local_exec)
)
CHUNKS = {}
if BATCH > 1:
    from nadpipe.jobs import stackable

    CHUNKS = batches.plan(PLAN.train_cells(), BATCH, stackable)
if workflow.is_main_process and runs.executing(workflow.output_settings.dryrun):
    batches.write_manifests(PLAN.train_cells(), CHUNKS)  # before any job runs
os.environ[slots.SLOTS_ENV] = ",".join(SLOTS)
os.environ[slots.LOCK_DIR_ENV] = os.path.abspath(CFG.gpus.lock_dir)
os.environ[backend.ENV] = CFG.gpus.backend().to_env()
if workflow.is_main_process and SLOTS:
    logger.info(f"nadpipe: {slots.describe(SLOTS)}")

# The conda environment of every rule (--software-deployment-method conda); its post-deploy
# script installs nadpipe from this checkout.
CONDA_ENV = "../../envs/nadpipe.yaml"
os.environ[nio.REPO_ENV] = str(Path(workflow.basedir).resolve())


wildcard_constraints:
    arch=nc.NAME_PATTERN,
    study="|".join(REGISTRY),
    variant=VARIANT_PATTERN,
    seed=r"-?\d+",


def end_of_run(ok):
    logger.info(runs.end(ok, PLAN.final_outputs(), WARNINGS, RUN_START, R))


def _cell(w):
    """(train job, model, record) of a one-seed train job's wildcards, and its chunk."""
    cell = ng.Cell(w.study, w.arch, w.variant, int(w.seed))
    job = PLAN.train_job(w.study, w.arch, w.variant, (cell.seed,))
    model = cell.path(ng.MODEL, R)
    return (job, model + ".pt", model + ".json"), CHUNKS.get(model + ".pt")


def batch_leader(w):
    """The record of the leader of this cell's chunk (ancient: only an order), for the
    chunk's other cells."""
    (_, model, _), chunk = _cell(w)
    return [] if chunk is None or chunk.leads(model) else [ancient(chunk.leader[2])]


def train_gpu(w):
    """A cell that its chunk's leader trains in this run claims its result: no GPU."""
    cell, chunk = _cell(w)
    return 0 if chunk is not None and chunk.trains_ahead(*cell) else GPU_JOB


def nads_of(w):
    return PLAN.nad_files(w.study, w.arch)


def cifar_of(w):
    return PLAN.cifar_files(w.study)


def evaluations_of(w):
    return PLAN.evaluations(w.study)


def figure_inputs(w):
    return PLAN.figure_inputs(w.study, w.figure, w.arch)
