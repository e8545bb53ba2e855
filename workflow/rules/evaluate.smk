rule evaluate:
    input:
        nads=nads_of,
        cifar=cifar_of,
        model=f"{R}/{{study}}/models/{{arch}}/{{variant}}_s{{seed}}.pt",
        record=f"{R}/{{study}}/models/{{arch}}/{{variant}}_s{{seed}}.json",
    output:
        table=f"{R}/{{study}}/eval/{{arch}}/{{variant}}_s{{seed}}.parquet",
        arrays=f"{R}/{{study}}/eval/{{arch}}/{{variant}}_s{{seed}}.npz",
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
