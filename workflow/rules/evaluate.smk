rule evaluate:
    input:
        nads=nads_of,
        cifar=cifar_of,
        model="results/{study}/models/{arch}/{variant}_s{seed}.pt",
        record="results/{study}/models/{arch}/{variant}_s{seed}.json",
    output:
        table="results/{study}/eval/{arch}/{variant}_s{seed}.parquet",
        arrays="results/{study}/eval/{arch}/{variant}_s{seed}.npz",
    log:
        "logs/{study}/evaluate/{arch}/{variant}_s{seed}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=GPU_JOB,
    params:
        job=lambda w: plain(PLAN.eval_job(w.study, w.arch, w.variant, int(w.seed))),
    script:
        "../scripts/evaluate.py"
