rule aggregate_pairs:
    input:
        evaluations=pair_results,
        analyses=pair_analyses,
    output:
        summary=f"{PAIR}/summary.parquet",
        runs=f"{PAIR}/runs.parquet",
    log:
        "logs/nad_pairs/aggregate.log",
    script:
        "../scripts/aggregate.py"
