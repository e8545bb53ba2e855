"""The shards and verdicts of the rounds an architecture's NADs until converged took, for the
NAD job (a temporary file: nadpipe.shards)."""

from nadpipe.io import load_json, save_json

sm = snakemake
rounds = [load_json(r) for r in sm.input.rounds]
save_json({"shards": list(sm.input.shards), "rounds": rounds}, sm.output[0])
