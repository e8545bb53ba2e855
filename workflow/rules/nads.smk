rule nads:
    input:
        nads_file=lambda w: PLAN.nad_job(w.arch).file or [],
    output:
        artifact=path(ng.NAD) + ".pt",
        npy=path(ng.NAD) + ".npy",
        summary=path(ng.NAD) + ".json",
    log:
        "logs/nads/{arch}.log",
    benchmark:
        "benchmarks/nads/{arch}.tsv"
    conda:
        CONDA_ENV
    threads: 4  # capped at --cores by Snakemake
    resources:
        gpu=RUN.gpu_job,
    params:
        job=lambda w: plain(PLAN.nad_job(w.arch)),
    script:
        "../scripts/nads.py"


rule plot_nads:
    input:
        path(ng.NAD) + ".pt",
    output:
        report(
            path(ng.NAD_FIGURE),
            caption="../report/nads.rst",
            category="NADs",
            subcategory="per architecture",
            labels={"architecture": "{arch}", "figure": "NADs"},
        ),
    log:
        "logs/nads/plots/nads_{arch}.log",
    conda:
        CONDA_ENV
    params:
        min_overlap=lambda w: CFG.nad_config(w.arch).min_overlap_top10,
    script:
        "../scripts/plot_nads.py"


rule signatures:
    input:
        expand(path(ng.NAD) + ".npy", arch=PLAN.nad_architectures()),
    output:
        table=path(ng.SIGNATURES),
        figure=report(
            path(ng.SIGNATURE_FIGURE),
            caption="../report/signatures.rst",
            category="NADs",
            subcategory="signatures",
            labels={"architecture": "all", "figure": "signatures"},
        ),
    log:
        "logs/signatures.log",
    conda:
        CONDA_ENV
    params:
        archs=PLAN.nad_architectures(),
        shapes=lambda w: [CFG.nad_shape(a) for a in PLAN.nad_architectures()],
    script:
        "../scripts/signatures.py"
