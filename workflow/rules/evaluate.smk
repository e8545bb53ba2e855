rule evaluate:
    input:
        nads=nads_of,
        cifar=cifar_of,
        model=path(npath.MODEL) + ".pt",
        record=path(npath.MODEL) + ".json",
    output:
        table=path(npath.EVAL) + ".parquet",
        arrays=path(npath.EVAL) + ".npz",
    log:
        logs("{study}/evaluate/{arch}/{variant}_s{seed}.log"),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=RUN.gpu_job,
    params:
        job=job_of("evaluate"),
    script:
        "../scripts/evaluate.py"
