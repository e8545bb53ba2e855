rule pair_dataset:
    input:
        nads=nads_of,
    output:
        f"{PAIR}/datasets/{CELL}.pt",
    log:
        f"logs/nad_pairs/datasets/{CELL}.log",
    conda:
        CONDA_ENV
    params:
        nad_source=lambda w: nc.nad_source(CFG, w.arch),
        data=lambda w: nc.pair_data(CFG),
        nad_params=lambda w: nc.nad_params(CFG, nc.nad_source(CFG, w.arch)),
    script:
        "../scripts/pair_dataset.py"
