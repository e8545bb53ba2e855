"""Train the model(s) of one cell: one seed, or all its seeds as one batched ensemble."""

from nadpipe.jobtable import run_job
from nadpipe.log import say

sm = snakemake
nads = list(sm.input.nads)  # empty for a study without NADs
summary = run_job(
    "train",
    sm.params.job,
    nads[0] if nads else None,
    list(sm.output.model),
    list(sm.output.record),
    slot=sm.resources.gpu,  # 0 for a cell its batch's job trained: it only claims the result
    ahead=sm.input.get("ahead"),  # a one-seed cell's (nadpipe.batching)
    inputs=[*sm.input.nads, *sm.input.cifar],
    log=sm.log[0],
    threads=sm.threads,
)
say(summary)
