"""One table of a study's evaluations, and one of its models' timings."""

from nadpipe.jobtable import run_job
from nadpipe.log import say

sm = snakemake
summary = run_job(
    "aggregate",
    list(sm.input.evaluations),
    sm.output.summary,
    sm.output.runs,
    sm.params.references,
    sm.params.axis,
    log=sm.log[0],
)
say(summary)
