"""A study's per-architecture summary table (test accuracy per cell and condition) for the
report."""

from nadpipe.jobtable import run_job

run_job(
    "report_summary",
    snakemake.input[0],
    snakemake.output[0],
    log=snakemake.log[0],
)
