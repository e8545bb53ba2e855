"""The config the run used, every default filled in: as YAML, and as a page the report shows."""

from nadpipe.jobtable import run_job

sm = snakemake
run_job(
    "resolved_config",
    sm.params.config,
    sm.output.yaml,
    sm.output.page,
    log=sm.log[0],
)
