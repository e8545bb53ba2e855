rule nads:
    output:
        "results/nads/{arch}.pt",
    params:
        job=lambda w: nc.nad_params(CFG, w.arch),
    log:
        "logs/nads/{arch}.log",
    benchmark:
        "benchmarks/nads/{arch}.tsv"
    threads: workflow.cores
    resources:
        gpu=1,
    script:
        "../scripts/nads.py"
