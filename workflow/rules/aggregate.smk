rule aggregate_pairs:
    input:
        evaluations=pair_results,
        analyses=pair_analyses,
    output:
        summary=f"{PAIR}/summary.parquet",
        runs=f"{PAIR}/runs.parquet",
    log:
        "logs/nad_pairs/aggregate.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/aggregate.py"


rule resolved_config:
    output:
        report(
            "results/config.yaml",
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        "logs/config.log",
    conda:
        CONDA_ENV
    params:
        config=CFG,
    script:
        "../scripts/resolved_config.py"
