"""NADs of one architecture (computed, or read from architectures.NAME.nads_file)."""

from nadpipe.jobs import nads_job
from nadpipe.log import say
from nadpipe.runner.worker import job_log

sm = snakemake
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = nads_job(sm.params.job, sm.output.artifact, sm.output.npy, sm.output.summary)
say(summary)
