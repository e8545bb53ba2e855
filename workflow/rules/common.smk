# Shared by all stages: the validated config, wildcard constraints and input functions.
# The grid logic lives in nadpipe.config, where the tests can import it.
from nadpipe import config as nc

CFG = nc.load_config(config, workflow.source_path("../schemas/config.schema.yaml"))
PAIR = "results/nad_pairs"
CELL = "{arch}/i{i}_j{j}_s{seed}"


wildcard_constraints:
    arch=r"[A-Za-z0-9_\-]+",
    i=r"\d+",
    j=r"\d+",
    seed=r"-?\d+",


def final_outputs():
    if not CFG["nad_pairs"]["enabled"]:
        return []
    return [f"{PAIR}/summary.parquet"] + expand(
        f"{PAIR}/plots/heatmap_{{arch}}.png", arch=CFG["nad_pairs"]["architectures"]
    )


def nads_of(wildcards):
    return f"results/nads/{nc.nad_source(CFG, wildcards.arch)}.pt"


def pair_results(wildcards):
    return [
        f"{PAIR}/eval/{c.arch}/i{c.i}_j{c.j}_s{c.seed}.parquet"
        for c in nc.pair_cells(CFG)
    ]
