"""The config the run used, every default filled in, for the report."""

import yaml

from nadpipe.io import job_log, save_text

with job_log(snakemake.log[0]):
    save_text(yaml.safe_dump(snakemake.params.config, sort_keys=False), snakemake.output[0])
