"""Concatenate per-cell results into the study's summary parquet (and its timings)."""

from nadpipe.io import job_log
from nadpipe.jobs import aggregate_job

sm = snakemake
with job_log(sm.log[0]):
    summary = aggregate_job(
        list(sm.input.evaluations), list(sm.input.analyses), sm.output.summary, sm.output.runs
    )
print(summary)
