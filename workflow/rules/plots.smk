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
    conda:
        CONDA_ENV
    script:
        "../scripts/plot_pair_heatmap.py"


rule plot_pair_metrics:
    input:
        f"{PAIR}/summary.parquet",
    output:
        report(
            f"{PAIR}/plots/{{figure}}_{{arch}}.png",
            caption="../report/pair_metrics.rst",
            category="NAD pairs",
            subcategory="{figure}",
            labels={"architecture": "{arch}", "figure": "{figure}"},
        ),
    log:
        "logs/nad_pairs/plots/{figure}_{arch}.log",
    wildcard_constraints:
        figure="reliance|complexity",
    conda:
        CONDA_ENV
    script:
        "../scripts/plot_pair_metrics.py"


rule plot_cross_sections:
    input:
        sections_of,
    output:
        report(
            f"{PAIR}/plots/cross_sections_{{arch}}.png",
            caption="../report/pair_cross_sections.rst",
            category="NAD pairs",
            labels={"architecture": "{arch}", "figure": "cross-sections"},
        ),
    log:
        "logs/nad_pairs/plots/cross_sections_{arch}.log",
    conda:
        CONDA_ENV
    script:
        "../scripts/plot_cross_sections.py"


rule plot_nads:
    input:
        "results/nads/{arch}.pt",
    output:
        report(
            "results/nads/plots/nads_{arch}.png",
            caption="../report/nads.rst",
            category="NADs",
            labels={"architecture": "{arch}"},
        ),
    log:
        "logs/nads/plots/nads_{arch}.log",
    conda:
        CONDA_ENV
    params:
        min_overlap=lambda w: nc.nad_min_overlap(CFG, w.arch),
    script:
        "../scripts/plot_nads.py"
