# The CIFAR-10 studies (cifar_nad, poison, flip): NADs -> train -> evaluate -> aggregate -> plot.
# The study's data are rebuilt in each job from the CIFAR-10 files and the NADs (seeded).
wildcard_constraints:
    study="|".join(nc.cifar.STUDIES),
    variant=r"k\d+|i\d+|original|flipped",


if CFG["cifar10"]["download"]:

    rule cifar10_download:
        output:
            cifar_inputs(None),
        log:
            "logs/cifar10_download.log",
        conda:
            CONDA_ENV
        params:
            root=lambda w, output: os.path.dirname(os.path.dirname(output[0])),
        script:
            "../scripts/cifar10_download.py"


rule train_cifar:
    input:
        cifar=cifar_inputs,
        nads=cifar_nads,
    output:
        model=f"{CIFAR_MODEL}.pt",
        metrics=f"{CIFAR_MODEL}.json",
    log:
        "logs/{study}/train/{arch}/{variant}_s{seed}.log",
    benchmark:
        "benchmarks/{study}/train/{arch}/{variant}_s{seed}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=1,
    params:
        job=lambda w: nc.cifar_job(CFG, w.study, w.arch),
    script:
        "../scripts/train_cifar.py"


rule evaluate_cifar:
    input:
        cifar=cifar_inputs,
        nads=cifar_nads,
        model=f"{CIFAR_MODEL}.pt",
        metrics=f"{CIFAR_MODEL}.json",
    output:
        "results/{study}/eval/{arch}/{variant}_s{seed}.parquet",
    log:
        "logs/{study}/evaluate/{arch}/{variant}_s{seed}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=1,
    params:
        job=lambda w: nc.cifar_job(CFG, w.study, w.arch),
        batch_size=lambda w: CFG[w.study]["eval_batch_size"],
        n_points=CFG["analysis"]["n_points"],
    script:
        "../scripts/evaluate_cifar.py"


rule aggregate_cifar:
    input:
        cifar_results,
    output:
        summary="results/{study}/summary.parquet",
        runs="results/{study}/runs.parquet",
    log:
        "logs/{study}/aggregate.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/aggregate_cifar.py"


rule plot_cifar:
    input:
        "results/{study}/summary.parquet",
    output:
        report(
            "results/{study}/plots/accuracy_{arch}.png",
            caption="../report/cifar.rst",
            category="CIFAR-10 studies",
            subcategory="{study}",
            labels={"study": "{study}", "architecture": "{arch}"},
        ),
    log:
        "logs/{study}/plots/accuracy_{arch}.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/plot_cifar.py"
