"""The report's landing page: what ran and the headline numbers of this run."""

from nadpipe.report import landing_page
from nadpipe.runner.worker import job_log

sm = snakemake
with job_log(sm.log[0]):
    landing_page(
        sm.params.config,
        list(sm.input.summaries),
        list(sm.input.nads),
        sm.output[0],
        list(sm.input.figures),
    )
