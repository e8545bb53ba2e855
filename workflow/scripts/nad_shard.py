"""One shard of an architecture's NAD networks: their input sensitivities (nadpipe.shards)."""

from nadpipe.jobs import nad_shard_job
from nadpipe.runner.worker import job_log

sm = snakemake
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    nad_shard_job(sm.params.job, sm.output.shard, sm.output.summary)
