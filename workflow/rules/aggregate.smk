rule aggregate_pairs:
    input:
        pair_results,
    output:
        f"{PAIR}/summary.parquet",
    log:
        "logs/nad_pairs/aggregate.log",
    script:
        "../scripts/aggregate.py"
