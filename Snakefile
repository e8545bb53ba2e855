# nadpipe: for every study of the config, NADs -> train -> evaluate -> aggregate -> plot.
# Run:  snakemake --cores all      (config.yaml; another config: --configfile configs/X.yaml)


from snakemake.utils import min_version

min_version("9.1.5")  # the floor pyproject.toml declares; tests/test_floor.py runs it


from nadpipe.config import check_yaml

check_yaml(
    "config.yaml"
)  # a YAML syntax error names the file and line (Snakemake's does not)


configfile: "config.yaml"


include: "workflow/rules/common.smk"


report: os.path.abspath(path(npath.LANDING))  # the first page, made by report_landing


include: "workflow/rules/nads.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/plots.smk"


rule all:
    default_target: True
    input:
        PLAN.final_outputs(),


onstart:
    RUN.start()


onsuccess:
    RUN.end(True)


onerror:
    RUN.end(False)
