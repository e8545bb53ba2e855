rule nads:
    output:
        "results/nads/{arch}.pt",
    log:
        "logs/nads/{arch}.log",
    benchmark:
        "benchmarks/nads/{arch}.tsv"
    conda:
        CONDA_ENV
    threads: 4  # capped at --cores by Snakemake
    resources:
        gpu=1,
    params:
        job=lambda w: nc.nad_params(CFG, w.arch),
    script:
        "../scripts/nads.py"
