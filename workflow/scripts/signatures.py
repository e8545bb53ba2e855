"""Architecture signatures: how the NADs of every pair of architectures overlap."""

from nadpipe.jobtable import run_job

sm = snakemake
run_job(
    "signatures",
    list(sm.input),
    sm.params.archs,
    sm.params.shapes,
    sm.output.table,
    sm.output.figure,
    log=sm.log[0],
)
