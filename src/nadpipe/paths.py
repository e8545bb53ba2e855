"""Every path under a run's results folder, `{root}` (nadpipe.config.results_root), as one
template each: the plan fills them (grid.Plan.at), the rules take them with their wildcards
(`rule_path`), and the provenance check globs them (`pattern`). Torch-free."""

from __future__ import annotations

import re

NAD = "{root}/nads/{arch}"
# the sensitivities of networks first .. stop - 1 (.pt; .json: what made them), for NADs in
# shards (nadpipe.shards); and, for NADs until converged, the verdict after each round
NAD_SHARD = "{root}/nads/shards/{arch}/{first}-{stop}"
NAD_ROUND = "{root}/nads/rounds/{arch}/{networks}.json"
# what the rounds until converged ask (settings, ceiling, threshold), rewritten when it changes;
# and, for the NAD job, the shards and verdicts of the rounds it took (temporary: Snakemake
# checks no change of a job whose inputs wait on a checkpoint, so the NAD job's own inputs are
# these two, and a changed goal reruns the rounds that decide)
NAD_GOAL = "{root}/nads/rounds/{arch}.json"
# what computes NADs besides their job spec (nadpipe's source, torch, the backend): an input of
# the NAD jobs (never a rerun: `ancient`), for Snakemake's output cache to key them by
NAD_CODE = "{root}/.nadpipe/nad_code.json"
NAD_CONVERGED = "{root}/nads/rounds/{arch}/converged.json"
MODEL = "{root}/{study}/models/{arch}/{variant}_s{seed}"
EVAL = "{root}/{study}/eval/{arch}/{variant}_s{seed}"
SUMMARY = "{root}/{study}/summary.parquet"
RUNS = "{root}/{study}/runs.parquet"
FIGURE = "{root}/{study}/plots/{figure}_{arch}.png"
NAD_FIGURE = "{root}/nads/plots/nads_{arch}.png"
SIGNATURES = "{root}/signatures/overlaps.parquet"
SIGNATURE_FIGURE = "{root}/signatures/signatures.png"
CONFIG = "{root}/config.yaml"
CONFIG_PAGE = "{root}/report/config.html"
LANDING = "{root}/report/landing.rst"
SUMMARY_TABLE = "{root}/report/summary_{study}.html"
# what else a run writes: its jobs' logs (and beside each, what the job used: LOG.usage.tsv), its
# run lock and what it knows of its config files; under the results folder, so that two configs
# never share them
LOGS = "{root}/logs"
RUN_LOCK = "{root}/.nadpipe/run.lock"
OWNER = "{root}/.nadpipe/configfiles"
# a one-seed cell's result trained ahead by its batch's job (empty: the cell trains alone); a
# temporary input of the cell's training, under the same path whatever the batching
AHEAD = "{root}/.nadpipe/ahead/{study}/{arch}/{variant}_s{seed}.pt"
# the checkpoints of batches of cells trained together, named by their cells
CHECKPOINTS = "{root}/.nadpipe/checkpoints"
# the last NADs each architecture's job made, hard links (no copy): a failed merge's outputs
# are deleted by Snakemake, and the run's end puts these back
# (nadpipe.runner.lifecycle.restore_kept)
KEPT = "{root}/.nadpipe/kept"
# the finished chunks of a NAD job's networks, kept until the job ends (a stopped job's rerun
# computes only the rest), one folder per job, named by what decides them
CHUNKS = "{root}/.nadpipe/chunks"
# this run's batches, written by the main process as it parses the workflow, named by their
# digest, for the batches' jobs and the jobs Snakemake starts elsewhere
BATCHES = "{root}/.nadpipe/batches/{digest}.json"
# what each job a run executed cost, one JSON line a job: what a dry run prices (nadpipe.cost)
COSTS = "{root}/.nadpipe/costs.jsonl"


def rule_path(template: str, root: str, **fixed: str) -> str:
    """`template` under `root` with the `fixed` fields filled in and the others left as
    Snakemake wildcards: rule_path(MODEL, "results", study="toy") ->
    "results/toy/models/{arch}/{variant}_s{seed}"."""
    out = template.replace("{root}", root)
    for name, value in fixed.items():
        out = out.replace("{" + name + "}", value)
    return out


def at(template: str, root: str) -> str:
    """`template` (with no field but `{root}`) under the results folder `root`."""
    return template.replace("{root}", root)


def pattern(template: str) -> str:
    """A glob of every file `template` names, relative to the results folder."""
    return re.sub(r"\{[a-z_]+\}", "*", template.removeprefix("{root}/"))
