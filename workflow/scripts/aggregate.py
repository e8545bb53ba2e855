"""One table of a study's evaluations, and one of its models' timings."""

from nadpipe.log import say
from nadpipe.runner import worker

sm = snakemake
summary = worker.run(
    "aggregate",
    list(sm.input.evaluations),
    sm.output.summary,
    sm.output.runs,
    sm.params.references,
    sm.params.axis,
    log=sm.log[0],
)
say(summary)
