"""The accuracy figure of one architecture in a CIFAR-10 study."""

from nadpipe.io import job_log, load_parquet
from nadpipe.plots import cifar_figure

sm = snakemake
with job_log(sm.log[0]):
    cifar_figure(load_parquet(sm.input[0]), sm.wildcards.study, sm.wildcards.arch, sm.output[0])
