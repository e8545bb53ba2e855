"""Write the ahead files of the cells of one rule (nadpipe.batching): a batch's job
(train_together_N) trains its cells together into them, and each cell's own job claims its
result; trains_alone leaves them empty (the cell trains in its own job)."""

sm = snakemake
if sm.rule == "trains_alone":  # one job per cell that trains alone: it imports nothing
    for path in sm.output:
        open(path, "w").close()
else:
    from nadpipe.batching import Batch
    from nadpipe.io import load_json, run_values
    from nadpipe.jobtable import run_job
    from nadpipe.log import say

    batch = next(Batch.of(b) for b in load_json(run_values()["batches"]) if b["name"] == sm.rule)
    summary = run_job(
        "train_together",
        list(batch.jobs),
        batch.nads[0] if batch.nads else None,
        list(sm.output),
        batch.checkpoint,
        slot=sm.resources.gpu,
        inputs=[*sm.input.nads, *sm.input.cifar],
        log=sm.log[0],
        threads=sm.threads,
    )
    say(summary)
