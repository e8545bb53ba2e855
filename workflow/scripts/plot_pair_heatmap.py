"""Heatmaps of one architecture's NAD-pair accuracies."""

import pandas as pd

from nadpipe.io import job_log
from nadpipe.plots import pair_heatmaps

with job_log(snakemake.log[0]):
    pair_heatmaps(
        pd.read_parquet(snakemake.input[0]), snakemake.wildcards.arch, snakemake.output[0]
    )
