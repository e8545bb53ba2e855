"""One round of NADs until converged: whether the shards so far converged (nadpipe.shards)."""

from nadpipe.jobs import nad_round_job
from nadpipe.runner.worker import job_log

sm = snakemake
with job_log(sm.log[0], sm.threads):
    nad_round_job(sm.params.job, list(sm.input.shards), sm.params.min_overlap, sm.output[0])
