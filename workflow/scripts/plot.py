"""One figure of a study for one architecture (nadpipe.studies names its function)."""

from nadpipe.runner import worker

sm = snakemake
w = sm.wildcards
worker.run(
    "nadpipe.plots:draw",
    sm.params.function,
    list(sm.input),
    w.study,
    w.arch,
    sm.output[0],
    sm.params.source,
    log=sm.log[0],
)
