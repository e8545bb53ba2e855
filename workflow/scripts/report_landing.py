"""The report's landing page: what ran and the headline numbers of this run."""

from nadpipe.jobtable import run_job

sm = snakemake
run_job(
    "report_landing",
    sm.params.config,
    list(sm.input.summaries),
    list(sm.input.nads),
    sm.output.landing,
    list(sm.input.figures),
    log=sm.log[0],
)
