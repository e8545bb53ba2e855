"""Heatmaps of per-model metrics (reliance or complexity) of one architecture."""

from nadpipe.io import job_log, load_parquet
from nadpipe.plots import FIGURES, metric_heatmaps

with job_log(snakemake.log[0]):
    metric_heatmaps(
        load_parquet(snakemake.input[0]),
        snakemake.wildcards.arch,
        output=snakemake.output[0],
        **FIGURES[snakemake.wildcards.figure],
    )
