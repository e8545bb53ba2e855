# Small text outputs for the report run where Snakemake runs (not as cluster jobs: each says
# `localrule: True`, which a workflow that uses nadpipe as a module keeps with its rules).


rule aggregate:
    input:
        evaluations=evaluations_of,
        references=lambda w: PLAN.reference_files(w.study),
    output:
        summary=path(npath.SUMMARY),
        runs=path(npath.RUNS),
    log:
        logs("{study}/aggregate.log"),
    conda:
        CONDA_ENV
    params:
        references=lambda w: PLAN.references(w.study),
        axis=lambda w: PLAN.reference_axis(w.study),
    script:
        "../scripts/aggregate.py"


rule report_summary:
    input:
        path(npath.SUMMARY),
    output:
        report(
            path(npath.SUMMARY_TABLE),
            caption="../report/summary_table.rst",
            category="{study}",
            subcategory="summary",
            labels={"architecture": "all", "figure": "summary table"},
        ),
    log:
        logs("{study}/report_summary.log"),
    localrule: True
    conda:
        CONDA_ENV
    script:
        "../scripts/report_summary.py"


rule resolved_config:
    output:
        yaml=path(npath.CONFIG),
        page=report(
            path(npath.CONFIG_PAGE),
            caption="../report/config.rst",
            category="Configuration",
            labels={"architecture": "all", "figure": "config"},
        ),
    log:
        logs("config.log"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        config=CFG.resolved(),
    script:
        "../scripts/resolved_config.py"


rule report_landing:
    input:
        summaries=expand(path(npath.SUMMARY), study=CFG.enabled()),
        nads=expand(path(npath.NAD) + ".json", arch=PLAN.nad_architectures()),
        figures=PLAN.headline_figures(),
        config=path(npath.CONFIG),
    output:
        landing=path(npath.LANDING),
    log:
        logs("report_landing.log"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        config=CFG.resolved(),
    script:
        "../scripts/report_landing.py"
