"""One table of a per-model study's evaluations, and one of its models' timings."""

from nadpipe.io import job_log
from nadpipe.jobs import STUDY_KEY, aggregate_job

sm = snakemake
with job_log(sm.log[0]):
    summary = aggregate_job(list(sm.input), [], sm.output.summary, sm.output.runs, STUDY_KEY)
print(summary)
