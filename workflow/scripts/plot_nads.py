"""The NAD figure of one architecture, and a warning when its NADs are not converged."""

from nadpipe.io import job_log, load_torch
from nadpipe.plots import nad_figure

sm = snakemake
with job_log(sm.log[0]):
    verdict = nad_figure(
        load_torch(sm.input[0]), sm.wildcards.arch, sm.output[0], sm.params.min_overlap
    )
print(verdict)
