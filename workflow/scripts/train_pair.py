"""Train the model(s) of a NAD-pair cell: one seed, or all its seeds as one ensemble."""

from nadpipe.io import job_log
from nadpipe.jobs import train_pair_job

sm = snakemake
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = train_pair_job(
        list(sm.input.datasets),
        list(sm.output.models),
        list(sm.output.metrics),
        train=sm.params.train,
        **sm.params.spec,
    )
print(summary)
