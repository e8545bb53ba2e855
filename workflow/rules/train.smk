if CFG["nad_pairs"]["group_seeds"]:

    # One job per cell trains all its seeds as one batched ensemble (one start-up, one
    # vectorised model); adding a seed retrains the cell's other seeds too.
    rule train_pair_seeds:
        input:
            datasets=seed_files("datasets", "pt"),
        output:
            models=seed_files("models", "pt"),
            metrics=seed_files("models", "json"),
        log:
            f"logs/nad_pairs/train/{CELL_SEEDS}.log",
        benchmark:
            f"benchmarks/nad_pairs/train/{CELL_SEEDS}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            gpu=1,
        params:
            spec=lambda w: nc.model_spec(CFG, w.arch),
            train=lambda w: nc.train_params(CFG, "nad_pairs", w.arch),
        script:
            "../scripts/train_pair.py"

else:

    rule train_pair:
        input:
            datasets=[f"{PAIR}/datasets/{CELL}.pt"],
        output:
            models=[f"{PAIR}/models/{CELL}.pt"],
            metrics=[f"{PAIR}/models/{CELL}.json"],
        log:
            f"logs/nad_pairs/train/{CELL}.log",
        benchmark:
            f"benchmarks/nad_pairs/train/{CELL}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            gpu=1,
        params:
            spec=lambda w: nc.model_spec(CFG, w.arch),
            train=lambda w: nc.train_params(CFG, "nad_pairs", w.arch),
        script:
            "../scripts/train_pair.py"
