rule train_pair:
    input:
        dataset=f"{PAIR}/datasets/{CELL}.pt",
    output:
        model=f"{PAIR}/models/{CELL}.pt",
        metrics=f"{PAIR}/models/{CELL}.json",
    log:
        f"logs/nad_pairs/train/{CELL}.log",
    benchmark:
        f"benchmarks/nad_pairs/train/{CELL}.tsv"
    threads: 1
    resources:
        gpu=1,
    params:
        spec=lambda w: nc.model_spec(CFG, w.arch),
        train=lambda w: nc.train_params(CFG, "nad_pairs", w.arch),
    script:
        "../scripts/train_pair.py"
