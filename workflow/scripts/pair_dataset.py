"""Spec (directions, settings, checksum) of one NAD-pair cell's data."""

from nadpipe.io import job_log
from nadpipe.jobs import pair_dataset_job

sm = snakemake
with job_log(sm.log[0], sm.threads):
    summary = pair_dataset_job(
        sm.input.nads,
        sm.output[0],
        arch=sm.wildcards.arch,
        nad_source=sm.params.nad_source,
        i=int(sm.wildcards.i),
        j=int(sm.wildcards.j),
        seed=int(sm.wildcards.seed),
        data=sm.params.data,
        nad_params=sm.params.nad_params,
    )
print(summary)
