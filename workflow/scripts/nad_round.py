"""One round of NADs until converged: whether the shards so far converged (nadpipe.shards)."""

from nadpipe.runner import worker

sm = snakemake
worker.run(
    "nad_round",
    sm.params.job,
    list(sm.input.shards),
    sm.params.min_overlap,
    sm.output[0],
    log=sm.log[0],
    threads=sm.threads,
)
