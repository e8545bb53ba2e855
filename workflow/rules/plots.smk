rule plot:
    input:
        figure_inputs,
    output:
        report(
            path(npath.FIGURE),
            caption="../report/figure.rst",
            category="{study}",
            subcategory="{figure}",
            labels={"architecture": "{arch}", "figure": "{figure}"},
        ),
    log:
        logs("{study}/plots/{figure}_{arch}.log"),
    wildcard_constraints:
        figure="|".join(sorted({f for s in REGISTRY for f in PLAN.figures(s)})),
    conda:
        CONDA_ENV
    params:
        caption=lambda w: PLAN.figures(w.study)[w.figure].caption.format(arch=w.arch),
        function=lambda w: PLAN.figures(w.study)[w.figure].function,
        source=lambda w: PLAN.figures(w.study)[w.figure].source,
    script:
        "../scripts/plot.py"
