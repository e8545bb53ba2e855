"""NADs of one architecture (computed, read from architectures.NAME.nads_file, or put together
from its shards; until converged, from those of the rounds it took)."""

from nadpipe.io import load_json
from nadpipe.jobtable import run_job
from nadpipe.log import say

sm = snakemake
took = load_json(sm.input.converged) if "converged" in sm.input.keys() else {}
summary = run_job(
    "nads",
    sm.params.job,
    sm.output.artifact,
    sm.output.npy,
    sm.output.summary,
    shards=took.get("shards") or list(sm.input.get("shards", [])),
    rounds=took.get("rounds"),
    log=sm.log[0],
    threads=sm.threads,
    gpu=sm.resources.gpu,
)
say(summary)
