"""Evaluate one trained model in and out of distribution."""

from nadpipe.io import job_log
from nadpipe.jobs import evaluate_pair_job

sm = snakemake
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = evaluate_pair_job(
        sm.input.dataset, sm.input.model, sm.input.metrics, sm.output[0], sm.params.batch_size
    )
print(summary)
