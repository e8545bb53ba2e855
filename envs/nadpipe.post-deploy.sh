#!/usr/bin/env bash
# Runs once in the new conda environment (Snakemake's post-deploy script): install nadpipe from
# the checkout the Snakefile runs from ("repo" of NADPIPE_RUN, set by nadpipe.runner.Run), editable
# and without dependencies (the environment file pins them).
set -euo pipefail
repo=$(python -c 'import json, os; print(json.loads(os.environ["NADPIPE_RUN"])["repo"])') || {
    echo "NADPIPE_RUN is set by the nadpipe Snakefile: run this environment through it" >&2
    exit 1
}
python -m pip install --no-deps --no-build-isolation -e "$repo"
