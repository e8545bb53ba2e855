"""Heatmaps of per-model metrics (reliance or complexity) of one architecture."""

import pandas as pd

from nadpipe.io import job_log
from nadpipe.plots import FIGURES, metric_heatmaps

with job_log(snakemake.log[0]):
    metric_heatmaps(
        pd.read_parquet(snakemake.input[0]),
        snakemake.wildcards.arch,
        output=snakemake.output[0],
        **FIGURES[snakemake.wildcards.figure],
    )
