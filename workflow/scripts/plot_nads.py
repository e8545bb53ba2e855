"""The NAD figure of one architecture, and a warning when its NADs are not converged."""

from nadpipe.jobtable import run_job
from nadpipe.log import say

sm = snakemake
verdict = run_job(
    "plot_nads",
    sm.input[0],
    sm.wildcards.arch,
    sm.output[0],
    sm.params.min_overlap,
    log=sm.log[0],
)
say(verdict)
