"""Train one model of a CIFAR-10 study."""

from nadpipe.io import job_log
from nadpipe.jobs import train_cifar_job

sm = snakemake
w = sm.wildcards
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = train_cifar_job(
        sm.input.nads,
        sm.output.model,
        sm.output.metrics,
        study=w.study,
        arch=w.arch,
        variant=w.variant,
        seed=int(w.seed),
        **sm.params.job,
    )
print(summary)
