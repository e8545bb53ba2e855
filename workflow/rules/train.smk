# One model per (study, arch, variant, seed); a study with group_seeds trains all seeds of a
# cell in one job (one batched ensemble) and has its own rule below. A cell's ahead file is
# written by its batch's job (train_together_N: the cell only claims its result) or, when it
# trains alone, empty by trains_alone (nadpipe.batching): batching never changes a cell's inputs.
# Both rules run one script and have no params: Snakemake keeps the provenance of a temporary
# file after removing it and reruns its maker when that provenance changes, so an ahead file
# made once by one of them and planned later by the other must look the same.
# trains_alone (batch None), then this run's batches. A loop, since a batch's outputs are its
# cells' ahead files, a list no wildcard pattern gives; one loop for both, since Snakemake's
# provenance of a rule's code is its lines. A batch's job finds its cells in the run's batches
# file (nadpipe.io.run_values), not params, which would be part of the ahead file's provenance.
for batch in [None, *BATCHES]:

    rule:
        name:
            batch.name if batch else "trains_alone"
        input:
            nads=list(batch.nads) if batch else nads_of,
            cifar=list(batch.cifar) if batch else cifar_of,
        output:
            [temp(a) for a in batch.aheads] if batch else temp(path(npath.AHEAD)),
        log:
            (
                logs(f"train_together/{batch.name}.log")
                if batch
                else logs("{study}/train/{arch}/{variant}_s{seed}.alone.log")
            ),
        localrule: batch is None  # a cell's empty file: where Snakemake runs
        conda:
            CONDA_ENV
        threads: 1
        resources:
            gpu=RUN.gpu_job if batch else 0,
        script:
            "../scripts/ahead.py"


rule train:
    input:
        nads=nads_of,
        cifar=cifar_of,
        ahead=path(npath.AHEAD),
    output:
        model=[weights(path(npath.MODEL) + ".pt")],
        record=[path(npath.MODEL) + ".json"],
    log:
        logs("{study}/train/{arch}/{variant}_s{seed}.log"),
    wildcard_constraints:
        study="|".join(s for s in REGISTRY if s not in PLAN.seed_ensembles()) or "(?!)",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=train_gpu,
    params:
        job=job_of("train"),
    script:
        "../scripts/train.py"


# a loop, since a study's seeds are one job's outputs: a list of a length no wildcard gives
for ensemble in PLAN.seed_ensembles():

    rule:
        name:
            PLAN.seed_rule(ensemble)
        input:
            nads=lambda w, s=ensemble: PLAN.nad_files(s, w.arch),
            cifar=PLAN.cifar_files(ensemble),
        output:
            model=[
                weights(m)
                for m in expand(
                    path(npath.MODEL, study=ensemble) + ".pt",
                    seed=CFG.studies[ensemble].seeds,
                    allow_missing=True,
                )
            ],
            record=expand(
                path(npath.MODEL, study=ensemble) + ".json",
                seed=CFG.studies[ensemble].seeds,
                allow_missing=True,
            ),
        log:
            logs(f"{ensemble}/train/{{arch}}/{{variant}}_seeds.log"),
        conda:
            CONDA_ENV
        threads: 1
        resources:
            gpu=RUN.gpu_job,
        params:
            job=job_of(PLAN.seed_rule(ensemble)),
        script:
            "../scripts/train.py"
