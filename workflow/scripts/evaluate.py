"""Evaluate one trained model: its study's conditions and measures."""

from nadpipe.jobtable import run_job
from nadpipe.log import say

sm = snakemake
nads = list(sm.input.nads)  # empty for a study without NADs
summary = run_job(
    "evaluate",
    sm.params.job,
    nads[0] if nads else None,
    sm.input.model,
    sm.input.record,
    sm.output.table,
    sm.output.arrays,
    log=sm.log[0],
    threads=sm.threads,
    gpu=sm.resources.gpu,
)
say(summary)
