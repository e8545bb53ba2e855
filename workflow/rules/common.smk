# Shared by all stages: the validated config, wildcard constraints and input functions.
# The grid logic lives in nadpipe.config, where the tests can import it.
from snakemake.logging import logger

from nadpipe import config as nc

CFG = nc.load_config(config, workflow.source_path("../schemas/config.schema.yaml"))
for message in nc.rank_warnings(CFG):
    logger.warning(f"WARNING: {message}")
PAIR = "results/nad_pairs"
CELL = "{arch}/i{i}_j{j}_s{seed}"
CELL_SEEDS = "{arch}/i{i}_j{j}_seeds"


wildcard_constraints:
    arch=r"[A-Za-z0-9_\-]+",
    i=r"\d+",
    j=r"\d+",
    seed=r"-?\d+",


def final_outputs():
    if not CFG["nad_pairs"]["enabled"]:
        return []
    tables = [f"{PAIR}/summary.parquet", f"{PAIR}/runs.parquet", "results/config.yaml"]
    nad_figures = expand(
        "results/nads/plots/nads_{arch}.png", arch=nc.nad_architectures(CFG)
    )
    return (
        tables
        + nad_figures
        + expand(
            f"{PAIR}/plots/{{fig}}_{{arch}}.png",
            fig=["heatmap", "reliance", "complexity", "cross_sections"],
            arch=CFG["nad_pairs"]["architectures"],
        )
    )


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
