"""Concatenate per-cell results into the study's summary parquet."""

from nadpipe.io import job_log
from nadpipe.jobs import aggregate_job

with job_log(snakemake.log[0]):
    aggregate_job(
        list(snakemake.input.evaluations), list(snakemake.input.analyses), snakemake.output[0]
    )
