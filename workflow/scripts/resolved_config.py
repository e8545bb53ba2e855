"""The config the run used, every default filled in: as YAML, and as a page the report shows."""

import yaml

from nadpipe.io import save_text
from nadpipe.report import config_page
from nadpipe.runner.worker import job_log

with job_log(snakemake.log[0]):
    text = yaml.safe_dump(snakemake.params.config, sort_keys=False)
    save_text(text, snakemake.output.yaml)
    config_page(text, snakemake.output.page)
