"""NADs of one architecture."""

from nadpipe.io import job_log
from nadpipe.jobs import nads_job

with job_log(snakemake.log[0], snakemake.threads, gpu=snakemake.resources.gpu):
    summary = nads_job(snakemake.output[0], **snakemake.params.job)
print(summary)
