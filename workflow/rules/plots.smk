rule plot:
    input:
        figure_inputs,
    output:
        report(
            "results/{study}/plots/{figure}_{arch}.png",
            caption="../report/figure.rst",
            category="{study}",
            subcategory="{figure}",
            labels={"architecture": "{arch}", "figure": "{figure}"},
        ),
    log:
        "logs/{study}/plots/{figure}_{arch}.log",
    wildcard_constraints:
        figure="|".join(sorted({f for s in REGISTRY.values() for f in s.figures})),
    conda:
        CONDA_ENV
    params:
        caption=lambda w: REGISTRY[w.study]
        .figures[w.figure]
        .caption.format(arch=w.arch),
        function=lambda w: REGISTRY[w.study].figures[w.figure].function,
    script:
        "../scripts/plot.py"
