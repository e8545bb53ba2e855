"""The config the run used, every default filled in, for the report."""

import yaml

from nadpipe.io import atomic_write, job_log

with job_log(snakemake.log[0]):
    text = yaml.safe_dump(dict(snakemake.params.config), sort_keys=False)
    atomic_write(snakemake.output[0], lambda tmp: open(tmp, "w").write(text))
