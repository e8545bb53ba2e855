"""Train one model of a per-model study (CIFAR-10 or NAD validation)."""

from nadpipe.io import job_log
from nadpipe.jobs import train_study_job

sm = snakemake
w = sm.wildcards
nads = list(sm.input.nads)  # empty for a study that needs no NADs
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = train_study_job(
        nads[0] if nads else None,
        sm.output.model,
        sm.output.metrics,
        study=w.study,
        arch=w.arch,
        variant=w.variant,
        seed=int(w.seed),
        **sm.params.job,
    )
print(summary)
