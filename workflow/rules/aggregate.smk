rule aggregate_pairs:
    input:
        evaluations=pair_results,
        analyses=pair_analyses,
    output:
        f"{PAIR}/summary.parquet",
    log:
        "logs/nad_pairs/aggregate.log",
    script:
        "../scripts/aggregate.py"
