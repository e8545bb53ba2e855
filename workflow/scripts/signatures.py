"""Architecture signatures: how the NADs of every pair of architectures overlap."""

from nadpipe.runner.worker import job_log
from nadpipe.signatures import signatures_job

sm = snakemake
with job_log(sm.log[0]):
    signatures_job(
        list(sm.input), sm.params.archs, sm.params.shapes, sm.output.table, sm.output.figure
    )
