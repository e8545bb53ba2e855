"""What computes this run's NADs besides their job spec (rule nad_code): a key of Snakemake's
output cache."""

import json

with open(snakemake.output[0], "w") as f:
    json.dump(snakemake.params.code, f, indent=1, sort_keys=True)
