#!/usr/bin/env bash
# Runs once in the new conda environment (Snakemake's post-deploy script): install nadpipe from
# the checkout the Snakefile runs from (NADPIPE_REPO, set by workflow/rules/common.smk), editable
# and without dependencies (the environment file pins them).
set -euo pipefail
python -m pip install --no-deps --no-build-isolation -e "${NADPIPE_REPO:?set by the nadpipe Snakefile}"
