"""NADs of one architecture (computed, read from architectures.NAME.nads_file, or put together
from its shards; until converged, from those of the rounds it took)."""

from nadpipe.io import load_json
from nadpipe.jobs import nads_job
from nadpipe.log import say
from nadpipe.runner.worker import job_log

sm = snakemake
took = load_json(sm.input.converged) if "converged" in sm.input.keys() else {}
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = nads_job(
        sm.params.job, sm.output.artifact, sm.output.npy, sm.output.summary,
        shards=took.get("shards") or list(sm.input.get("shards", [])), rounds=took.get("rounds"),
    )  # fmt: skip
say(summary)
