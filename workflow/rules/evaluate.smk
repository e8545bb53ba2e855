rule evaluate_pair:
    input:
        dataset=f"{PAIR}/datasets/{CELL}.pt",
        model=f"{PAIR}/models/{CELL}.pt",
        metrics=f"{PAIR}/models/{CELL}.json",
    output:
        f"{PAIR}/eval/{CELL}.parquet",
    log:
        f"logs/nad_pairs/evaluate/{CELL}.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=1,
    params:
        batch_size=CFG["nad_pairs"]["eval_batch_size"],
    script:
        "../scripts/evaluate_pair.py"


rule analyze_pair:
    input:
        dataset=f"{PAIR}/datasets/{CELL}.pt",
        model=f"{PAIR}/models/{CELL}.pt",
        metrics=f"{PAIR}/models/{CELL}.json",
    output:
        table=f"{PAIR}/analysis/{CELL}.parquet",
        sections=f"{PAIR}/sections/{CELL}.npz",
    log:
        f"logs/nad_pairs/analysis/{CELL}.log",
    benchmark:
        f"benchmarks/nad_pairs/analysis/{CELL}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        gpu=1,
    params:
        settings=CFG["analysis"],
    script:
        "../scripts/analyze_pair.py"
