"""Write the ahead files of the cells of one rule (nadpipe.batching): a batch's job
(train_together_N) trains its cells together into them, and each cell's own job claims its
result; trains_alone leaves them empty (the cell trains in its own job)."""

sm = snakemake
# a cell that trains alone has its wildcards; a batch has none (by its outputs, not its rule's
# name, which a workflow that uses nadpipe as a module prefixes)
if len(sm.wildcards):  # one job per cell that trains alone: it imports nothing
    for path in sm.output:
        open(path, "w").close()
else:
    from nadpipe.batching import Batch
    from nadpipe.io import load_json, run_values
    from nadpipe.jobtable import run_job
    from nadpipe.log import say

    batches = load_json(run_values()["batches"])
    batch = next(Batch.of(b) for b in batches if set(b["aheads"]) == set(sm.output))
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
