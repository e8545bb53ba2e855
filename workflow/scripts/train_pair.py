"""Train one model of a NAD-pair cell."""

from nadpipe.io import job_log
from nadpipe.jobs import train_pair_job

sm = snakemake
with job_log(sm.log[0], sm.threads):
    train_pair_job(
        sm.input.dataset,
        sm.output.model,
        sm.output.metrics,
        train=sm.params.train,
        **sm.params.spec,
    )
