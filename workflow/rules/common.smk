# Shared by all stages: the validated config, wildcard constraints and input functions.
# The grid logic lives in nadpipe.config, where the tests can import it.
import os
from pathlib import Path

import torch
from snakemake.logging import logger

from nadpipe import config as nc
from nadpipe import io as nio
from nadpipe import slots

CFG = nc.load_config(config, workflow.source_path("../schemas/config.schema.yaml"))
for message in nc.rank_warnings(CFG):
    logger.warning(f"WARNING: {message}")

# The GPU slot pool of this machine's jobs (nadpipe.slots), passed through the environment so
# that a different --resources gpu=N reruns nothing.
GPU_SLOTS = slots.slot_count(
    CFG["gpus"]["slots"],
    workflow.global_resources.get("gpu"),
    torch.cuda.device_count(),
)
os.environ[slots.SLOTS_ENV] = str(GPU_SLOTS)
os.environ[slots.LOCK_DIR_ENV] = os.path.abspath(CFG["gpus"]["lock_dir"])
os.environ[nio.CUDNN_BENCHMARK_ENV] = "1" if CFG["gpus"]["cudnn_benchmark"] else "0"

# The conda environment of every rule (--software-deployment-method conda); its post-deploy
# script installs nadpipe from this checkout.
CONDA_ENV = "../../envs/nadpipe.yaml"
os.environ[nio.REPO_ENV] = str(Path(workflow.basedir).resolve())
PAIR = "results/nad_pairs"
CIFAR_MODEL = "results/{study}/models/{arch}/{variant}_s{seed}"
CELL = "{arch}/i{i}_j{j}_s{seed}"
CELL_SEEDS = "{arch}/i{i}_j{j}_seeds"


wildcard_constraints:
    arch=r"[A-Za-z0-9_\-]+",
    i=r"\d+",
    j=r"\d+",
    seed=r"-?\d+",


def final_outputs():
    """Every table and figure of the enabled studies, the NAD figures and the config."""
    out = []
    if CFG["nad_pairs"]["enabled"]:
        out += [f"{PAIR}/summary.parquet", f"{PAIR}/runs.parquet"]
        out += expand(
            f"{PAIR}/plots/{{fig}}_{{arch}}.png",
            fig=["heatmap", "reliance", "complexity", "cross_sections"],
            arch=CFG["nad_pairs"]["architectures"],
        )
    for study in nc.studies.STUDIES:
        if CFG[study]["enabled"]:
            out += [f"results/{study}/summary.parquet", f"results/{study}/runs.parquet"]
            out += expand(
                f"results/{study}/plots/accuracy_{{arch}}.png",
                arch=CFG[study]["architectures"],
            )
    if not out:
        return []
    nad_figures = expand(
        "results/nads/plots/nads_{arch}.png", arch=nc.nad_architectures(CFG)
    )
    return out + nad_figures + ["results/config.yaml"]


def nads_of(wildcards):
    return f"results/nads/{nc.nad_source(CFG, wildcards.arch)}.pt"


def cell_files(kind, ext, cells):
    return [f"{PAIR}/{kind}/{c.arch}/i{c.i}_j{c.j}_s{c.seed}.{ext}" for c in cells]


def seed_files(kind, ext):
    """One file per seed of the cell {arch, i, j}: the outputs of a seed-ensemble job."""
    return expand(
        f"{PAIR}/{kind}/{{arch}}/i{{i}}_j{{j}}_s{{seed}}.{ext}",
        seed=CFG["nad_pairs"]["seeds"],
        allow_missing=True,
    )


def pair_results(wildcards):
    return cell_files("eval", "parquet", nc.pair_cells(CFG))


def pair_analyses(wildcards):
    return cell_files("analysis", "parquet", nc.pair_cells(CFG))


def sections_of(wildcards):
    return cell_files("sections", "npz", nc.section_cells(CFG, wildcards.arch))


def cifar_inputs(wildcards):
    return nc.cifar.cifar_files(CFG["cifar10"]["root"])


def study_cifar(wildcards):
    """The CIFAR-10 files, for the CIFAR studies only."""
    return cifar_inputs(wildcards) if nc.studies.needs_cifar(wildcards.study) else []


def study_nads(wildcards):
    """The architecture's NADs, for the studies that use them (all but fourier)."""
    if not nc.studies.needs_nads(wildcards.study):
        return []
    return [f"results/nads/{nc.nad_source(CFG, wildcards.arch)}.pt"]


def study_results(wildcards):
    return [
        f"results/{c.study}/eval/{c.arch}/{c.variant}_s{c.seed}.parquet"
        for c in nc.study_cells(CFG, wildcards.study)
    ]
