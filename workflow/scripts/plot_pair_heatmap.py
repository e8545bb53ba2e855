"""Heatmaps of one architecture's NAD-pair accuracies."""

from nadpipe.io import job_log, load_parquet
from nadpipe.plots import pair_heatmaps

with job_log(snakemake.log[0]):
    pair_heatmaps(load_parquet(snakemake.input[0]), snakemake.wildcards.arch, snakemake.output[0])
