# One model per (study, arch, variant, seed); a study with group_seeds trains all seeds of a
# cell in one job (one batched ensemble) and has its own rule below.
rule train:
    input:
        nads=nads_of,
        cifar=cifar_of,
        leader=batch_leader,
    output:
        model=[path(npath.MODEL) + ".pt"],
        record=[path(npath.MODEL) + ".json"],
    log:
        logs("{study}/train/{arch}/{variant}_s{seed}.log"),
    wildcard_constraints:
        study="|".join(s for s in REGISTRY if s not in PLAN.grouped()) or "(?!)",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=train_gpu,
    params:
        job=lambda w: plain(PLAN.train_job(w.study, w.arch, w.variant, (int(w.seed),))),
    script:
        "../scripts/train.py"


for grouped in PLAN.grouped():

    rule:
        name:
            f"train_{grouped}_seeds"
        input:
            nads=lambda w, s=grouped: PLAN.nad_files(s, w.arch),
            cifar=PLAN.cifar_files(grouped),
        output:
            model=expand(
                path(npath.MODEL, study=grouped) + ".pt",
                seed=CFG.studies[grouped].seeds,
                allow_missing=True,
            ),
            record=expand(
                path(npath.MODEL, study=grouped) + ".json",
                seed=CFG.studies[grouped].seeds,
                allow_missing=True,
            ),
        log:
            logs(f"{grouped}/train/{{arch}}/{{variant}}_seeds.log"),
        conda:
            CONDA_ENV
        threads: 1
        resources:
            gpu=RUN.gpu_job,
        params:
            job=lambda w, s=grouped: plain(
                PLAN.train_job(s, w.arch, w.variant, CFG.studies[s].seeds)
            ),
        script:
            "../scripts/train.py"
