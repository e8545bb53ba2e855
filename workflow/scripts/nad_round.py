"""One round of NADs until converged: whether the shards so far converged (nadpipe.shards)."""

from nadpipe.jobtable import run_job

sm = snakemake
run_job(
    "nad_round",
    sm.params.job,
    list(sm.input.shards),
    sm.params.min_overlap,
    sm.output[0],
    log=sm.log[0],
    threads=sm.threads,
)
