# Shared by all stages: the validated config and its plan (nadpipe.config, nadpipe.grid), the
# run machinery, wildcard constraints and input functions. The grid logic lives in
# nadpipe.grid, where the tests can import it.

import os

from nadpipe import batching as nb
from nadpipe import config as nc
from nadpipe import grid as ng
from nadpipe import io as nio
from nadpipe import paths as npath
from nadpipe.jobtable import start_server
from nadpipe.pricing import Pricer
from nadpipe.runner import surface
from nadpipe.runner.command import Command, refusals
from nadpipe.settings import plain
from nadpipe.studies import REGISTRY, variant_pattern

with refusals():  # said in nadpipe's words, without Snakemake's traceback lines
    # a key given twice in the config files (YAML would keep the last without a word)
    for _file in surface.config_files(workflow):
        nc.check_yaml(_file)
    CFG, WARNINGS = nc.load_config(
        config,
        workflow.source_path("../schemas/config.schema.yaml"),
        surface.config_overrides(workflow),  # --config values, typed as in a file
    )
    # every result under one folder per config file (nadpipe.config.results_root)
    R = nc.results_root(CFG, surface.config_files(workflow))
    PLAN = ng.Plan(CFG, R)
    # the run machinery (nadpipe.runner): while Snakemake parses it only reads and plans (the GPU
    # slot pool, how many cells train together); it starts with the jobs (the Snakefile's onstart)
    RUN = Command(workflow, CFG, PLAN, R, WARNINGS, Pricer(PLAN), start_server)


def path(template, **fixed):
    """A path of nadpipe.paths under this run's results folder, its other fields wildcards."""
    return npath.rule_path(template, R, **fixed)


def weights(model):
    """A trained model's weights: temporary unless the config keeps them (keep_models)."""
    return model if CFG.keep_models else temp(model)


def logs(name):
    """A job's log, under this run's results folder (nadpipe.paths.LOGS)."""
    return f"{path(npath.LOGS)}/{name}"


# The conda environment of every rule (--software-deployment-method conda); its post-deploy
# script installs nadpipe from this checkout.
CONDA_ENV = "../../envs/nadpipe.yaml"


wildcard_constraints:
    arch=nc.NAME_PATTERN,
    study="|".join(REGISTRY),
    variant=variant_pattern(),  # the config's studies of one's own loaded by now
    seed=r"-?\d+",
    first=r"\d+",
    stop=r"\d+",
    networks=r"\d+",


# the stale cells this run trains together (nadpipe.batching), planned by the main process
BATCHES = [
    nb.Batch.of(b)
    for b in RUN.shared(
        "batches",
        lambda: [b.plain() for b in PLAN.batches(RUN.accelerated, RUN.forced)],
    )
    or []
]
TRAINED_AHEAD = {a for b in BATCHES for a in b.aheads}


def train_gpu(w):
    """A cell its batch's job trains only claims its result: no GPU."""
    ahead = ng.Cell(w.study, w.arch, w.variant, int(w.seed)).path(npath.AHEAD, R)
    return 0 if ahead in TRAINED_AHEAD else RUN.gpu_job


def job_of(rule):
    """A rule's params `job`: its typed job from the plan (nadpipe.grid.Plan.job), as plain
    data, which Snakemake compares to rerun a job whose spec changed."""
    return lambda w: plain(PLAN.job(rule, dict(w.items())))


def nads_of(w):
    return PLAN.nad_files(w.study, w.arch)


def cifar_of(w):
    return PLAN.cifar_files(w.study)


def evaluations_of(w):
    return PLAN.evaluations(w.study)


def figure_inputs(w):
    return PLAN.figure_inputs(w.study, w.figure, w.arch)


def nad_rounds(w):
    """The rounds until converged: each a checkpoint, Snakemake plans the next once it knows;
    the shards of the first round that converged (or of the last), and every round's verdict.
    """
    shards, rounds = [], []
    for networks in PLAN.nad_rounds(w.arch):
        rounds.append(
            checkpoints.nad_round.get(arch=w.arch, networks=networks).output[0]
        )
        shards = PLAN.nad_shards(w.arch, networks)
        if nio.load_json(rounds[-1])["converged"]:
            break
    return {"shards": shards, "rounds": rounds}


def nad_inputs(w):
    """A file to read; or the shards to put together; or, until converged, what the rounds
    ask and what they took (nad_converged)."""
    if PLAN.nad_rounds(w.arch):
        made = {
            "goal": path(npath.NAD_GOAL, arch=w.arch),
            "converged": path(npath.NAD_CONVERGED, arch=w.arch),
        }
    else:
        made = {
            "nads_file": PLAN.nad_job(w.arch).file or [],
            "shards": PLAN.nad_shards(w.arch),
        }
    # and what computes them: the output cache's key, never a rerun (rule nad_code)
    return {**made, "code": ancient(path(npath.NAD_CODE))}
