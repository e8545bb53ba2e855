# Shared by all stages: the validated config and its plan (nadpipe.config, nadpipe.grid), the
# run machinery, wildcard constraints and input functions. The grid logic lives in
# nadpipe.grid, where the tests can import it.
import os
from pathlib import Path

from nadpipe import config as nc
from nadpipe import grid as ng
from nadpipe import io as nio
from nadpipe import paths as npath
from nadpipe.runner import Run
from nadpipe.settings import plain
from nadpipe.studies import REGISTRY, VARIANT_PATTERN

CFG, WARNINGS = nc.load_config(
    config,
    workflow.source_path("../schemas/config.schema.yaml"),
    workflow.config_settings.config,  # --config values, typed as in a file
)
# every result under one folder per config file (nadpipe.config.results_root)
R = nc.results_root(CFG, workflow.config_settings.configfiles)
PLAN = ng.Plan(CFG, R)
# the run machinery (nadpipe.runner): while Snakemake parses it only reads and plans (the GPU
# slot pool, the cells trained together); it starts with the jobs (the Snakefile's onstart)
RUN = Run(workflow, CFG, PLAN, R, WARNINGS)


def path(template, **fixed):
    """A path of nadpipe.paths under this run's results folder, its other fields wildcards."""
    return npath.rule_path(template, R, **fixed)


def logs(name):
    """A job's log, under this run's results folder (nadpipe.paths.LOGS)."""
    return f"{path(npath.LOGS)}/{name}"


def benchmarks(name):
    """A job's benchmark table, under this run's results folder (nadpipe.paths.BENCHMARKS)."""
    return f"{path(npath.BENCHMARKS)}/{name}"


# The conda environment of every rule (--software-deployment-method conda); its post-deploy
# script installs nadpipe from this checkout.
CONDA_ENV = "../../envs/nadpipe.yaml"
os.environ[nio.REPO_ENV] = str(Path(workflow.basedir).resolve())
# the config's studies of one's own, imported by every job (nadpipe.studies)
os.environ[nio.RUN_STUDIES_ENV] = ",".join(CFG.study_modules)


wildcard_constraints:
    arch=nc.NAME_PATTERN,
    study="|".join(REGISTRY),
    variant=VARIANT_PATTERN,
    seed=r"-?\d+",


def _cell(w):
    """(train job, model, record) of a one-seed train job's wildcards, and its chunk."""
    cell = ng.Cell(w.study, w.arch, w.variant, int(w.seed))
    job = PLAN.train_job(w.study, w.arch, w.variant, (cell.seed,))
    model = cell.path(npath.MODEL, R)
    return (job, model + ".pt", model + ".json"), RUN.chunks.get(model + ".pt")


def batch_leader(w):
    """The record of the leader of this cell's chunk (ancient: only an order), for the
    chunk's other cells."""
    (_, model, _), chunk = _cell(w)
    return [] if chunk is None or chunk.leads(model) else [ancient(chunk.leader[2])]


def train_gpu(w):
    """A cell that its chunk's leader trains in this run claims its result: no GPU."""
    cell, chunk = _cell(w)
    return 0 if chunk is not None and chunk.trains_ahead(*cell) else RUN.gpu_job


def nads_of(w):
    return PLAN.nad_files(w.study, w.arch)


def cifar_of(w):
    return PLAN.cifar_files(w.study)


def evaluations_of(w):
    return PLAN.evaluations(w.study)


def figure_inputs(w):
    return PLAN.figure_inputs(w.study, w.figure, w.arch)
