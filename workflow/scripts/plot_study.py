"""The accuracy figure of one architecture in a per-model study."""

from nadpipe.io import job_log, load_parquet
from nadpipe.plots import study_figure

sm = snakemake
with job_log(sm.log[0]):
    study_figure(load_parquet(sm.input[0]), sm.wildcards.study, sm.wildcards.arch, sm.output[0])
