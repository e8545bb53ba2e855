"""What an architecture's rounds of NADs until converged ask (grid.Plan.nad_goal), as a file:
rewritten when it changes, so that the NAD job sees the change (nadpipe.shards)."""

from nadpipe.io import save_json

save_json(snakemake.params.goal, snakemake.output[0])
