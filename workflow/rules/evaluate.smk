rule evaluate:
    input:
        nads=nads_of,
        cifar=cifar_of,
        model=path(ng.MODEL) + ".pt",
        record=path(ng.MODEL) + ".json",
    output:
        table=path(ng.EVAL) + ".parquet",
        arrays=path(ng.EVAL) + ".npz",
    log:
        "logs/{study}/evaluate/{arch}/{variant}_s{seed}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=RUN.gpu_job,
    params:
        job=lambda w: plain(PLAN.eval_job(w.study, w.arch, w.variant, int(w.seed))),
    script:
        "../scripts/evaluate.py"
