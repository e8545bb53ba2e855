# The per-model studies (CIFAR-10: cifar_nad, poison, flip; NAD validation: single_direction,
# fourier): NADs -> train_model -> evaluate_model -> aggregate_study -> plot_study. Each job
# rebuilds its study's data (seeded) from the NADs and, for the CIFAR studies, CIFAR-10.
wildcard_constraints:
    study="|".join(nc.studies.STUDIES),
    variant=r"k\d+|i\d+|original|flipped|f\d+_\d+",


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


rule train_model:
    input:
        cifar=study_cifar,
        nads=study_nads,
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
        job=lambda w: nc.study_job(CFG, w.study, w.arch),
    script:
        "../scripts/train_model.py"


rule evaluate_model:
    input:
        cifar=study_cifar,
        nads=study_nads,
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
        job=lambda w: nc.study_job(CFG, w.study, w.arch),
        batch_size=lambda w: CFG[w.study]["eval_batch_size"],
        n_points=CFG["analysis"]["n_points"],
    script:
        "../scripts/evaluate_model.py"


rule aggregate_study:
    input:
        study_results,
    output:
        summary="results/{study}/summary.parquet",
        runs="results/{study}/runs.parquet",
    log:
        "logs/{study}/aggregate.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/aggregate_study.py"


rule plot_study:
    input:
        "results/{study}/summary.parquet",
    output:
        report(
            "results/{study}/plots/accuracy_{arch}.png",
            caption="../report/study.rst",
            category="Per-model studies",
            subcategory="{study}",
            labels={"study": "{study}", "architecture": "{arch}"},
        ),
    log:
        "logs/{study}/plots/accuracy_{arch}.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/plot_study.py"
