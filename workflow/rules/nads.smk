rule nads:
    input:
        nads_file=lambda w: PLAN.nad_job(w.arch).file or [],
    output:
        artifact=path(npath.NAD) + ".pt",
        npy=path(npath.NAD) + ".npy",
        summary=path(npath.NAD) + ".json",
    log:
        logs("nads/{arch}.log"),
    benchmark:
        benchmarks("nads/{arch}.tsv")
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
        path(npath.NAD) + ".pt",
    output:
        report(
            path(npath.NAD_FIGURE),
            caption="../report/nads.rst",
            category="NADs",
            subcategory="per architecture",
            labels={"architecture": "{arch}", "figure": "NADs"},
        ),
    log:
        logs("nads/plots/nads_{arch}.log"),
    conda:
        CONDA_ENV
    params:
        min_overlap=lambda w: CFG.nad_config(w.arch).min_overlap_top10,
    script:
        "../scripts/plot_nads.py"


rule signatures:
    input:
        expand(path(npath.NAD) + ".npy", arch=PLAN.nad_architectures()),
    output:
        table=path(npath.SIGNATURES),
        figure=report(
            path(npath.SIGNATURE_FIGURE),
            caption="../report/signatures.rst",
            category="NADs",
            subcategory="signatures",
            labels={"architecture": "all", "figure": "signatures"},
        ),
    log:
        logs("signatures.log"),
    conda:
        CONDA_ENV
    params:
        archs=PLAN.nad_architectures(),
        shapes=lambda w: [CFG.nad_shape(a) for a in PLAN.nad_architectures()],
    script:
        "../scripts/signatures.py"
