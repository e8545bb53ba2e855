"""Geometry and complexity of one trained model."""

from nadpipe.io import job_log
from nadpipe.jobs import analyze_pair_job

sm = snakemake
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = analyze_pair_job(
        sm.input.dataset,
        sm.input.model,
        sm.input.metrics,
        sm.output.table,
        sm.output.sections,
        sm.params.settings,
    )
print(summary)
