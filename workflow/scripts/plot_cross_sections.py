"""Decision-boundary cross-sections of one architecture's models, one panel per NAD pair."""

import numpy as np

from nadpipe.io import job_log, read_artifact
from nadpipe.plots import cross_section_grid

with job_log(snakemake.log[0]):
    sections = [dict(read_artifact(p, np.load)) for p in snakemake.input]
    cross_section_grid(sections, snakemake.wildcards.arch, snakemake.output[0])
