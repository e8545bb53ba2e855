"""One figure of a study for one architecture (nadpipe.studies names its function)."""

from nadpipe.jobtable import run_job

sm = snakemake
w = sm.wildcards
run_job(
    "plot",
    sm.params.function,
    list(sm.input),
    w.study,
    w.arch,
    sm.output[0],
    sm.params.source,
    log=sm.log[0],
)
