"""One shard of an architecture's NAD networks: their input sensitivities (nadpipe.shards)."""

from nadpipe.jobtable import run_job

sm = snakemake
run_job(
    "nad_shard",
    sm.params.job,
    sm.output.shard,
    sm.output.summary,
    log=sm.log[0],
    threads=sm.threads,
    gpu=sm.resources.gpu,
)
