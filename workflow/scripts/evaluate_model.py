"""Evaluate one trained model of a per-model study."""

from nadpipe.io import job_log
from nadpipe.jobs import evaluate_study_job

sm = snakemake
w = sm.wildcards
nads = list(sm.input.nads)  # empty for a study that needs no NADs
job = {k: v for k, v in sm.params.job.items() if k in ("data", "cifar10", "nad_params")}
with job_log(sm.log[0], sm.threads, gpu=sm.resources.gpu):
    summary = evaluate_study_job(
        nads[0] if nads else None,
        sm.input.model,
        sm.input.metrics,
        sm.output[0],
        study=w.study,
        arch=w.arch,
        variant=w.variant,
        seed=int(w.seed),
        batch_size=sm.params.batch_size,
        n_points=sm.params.n_points,
        **job,
    )
print(summary)
