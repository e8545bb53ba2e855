rule plot_pair_heatmap:
    input:
        f"{PAIR}/summary.parquet",
    output:
        report(
            f"{PAIR}/plots/heatmap_{{arch}}.png",
            caption="../report/pair_heatmap.rst",
            category="NAD pairs",
            labels={"architecture": "{arch}"},
        ),
    log:
        "logs/nad_pairs/plots/heatmap_{arch}.log",
    script:
        "../scripts/plot_pair_heatmap.py"
