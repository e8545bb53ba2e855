"""Evaluate one trained model: its study's conditions and measures."""

from nadpipe.log import say
from nadpipe.runner import worker

sm = snakemake
nads = list(sm.input.nads)  # empty for a study without NADs
summary = worker.run(
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
