"""A study's per-architecture summary table (test accuracy per cell and condition) for the
report."""

from nadpipe.io import load_parquet
from nadpipe.report import summary_table
from nadpipe.runner.worker import job_log

with job_log(snakemake.log[0]):
    summary_table(load_parquet(snakemake.input[0]), snakemake.output[0])
