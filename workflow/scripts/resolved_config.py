"""The config the run used, every default filled in: as YAML, and as a page the report shows."""

from nadpipe.runner import worker

sm = snakemake
worker.run(
    "resolved_config",
    sm.params.config,
    sm.output.yaml,
    sm.output.page,
    log=sm.log[0],
)
