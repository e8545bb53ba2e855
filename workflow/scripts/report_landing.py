"""The report's landing page: what ran and the headline numbers of this run."""

from nadpipe.runner import worker

sm = snakemake
worker.run(
    "report_landing",
    sm.params.config,
    list(sm.input.summaries),
    list(sm.input.nads),
    sm.output[0],
    list(sm.input.figures),
    log=sm.log[0],
)
