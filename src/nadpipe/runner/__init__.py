"""The run machinery: what a Snakemake run of nadpipe does besides its jobs.

`command.Command` is its one entry point, made once by common.smk while Snakemake parses the
workflow; `worker` runs the jobs (in a warm server, or in the job's own process), `slots` holds
the GPU slots, `lifecycle` the run lock and the run's end, `surface` every read of Snakemake
beyond a Snakefile's documented objects. This file imports none of them: a job script imports
the worker alone.
"""
