# nadpipe: NADs per architecture -> datasets per NAD pair -> train -> evaluate -> aggregate -> plot;
# the per-model studies (CIFAR-10, NAD validation): NADs -> train -> evaluate -> aggregate -> plot.
# Run:  snakemake --cores all      (config.yaml; another config: --configfile configs/X.yaml)


from snakemake.utils import min_version

min_version("8.10")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/nads.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/studies.smk"


rule all:
    default_target: True
    input:
        final_outputs(),


onsuccess:
    print("\nnadpipe finished. Results:\n  " + "\n  ".join(final_outputs()))
