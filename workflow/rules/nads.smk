# What computes NADs besides their job spec: part of the key of the NAD jobs in Snakemake's output
# cache (`cache: True`, used with --cache and SNAKEMAKE_OUTPUT_CACHE), never a reason to rerun
# them (`ancient`); remade whenever it changes, in a moment.
rule nad_code:
    output:
        path(npath.NAD_CODE),
    log:
        logs("nads/code.log"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        code=RUN.nad_code(),
    script:
        "../scripts/nad_code.py"


rule nad_shard:
    input:
        code=ancient(path(npath.NAD_CODE)),
    output:
        multiext(path(npath.NAD_SHARD), shard=".pt", summary=".json"),
    log:
        logs("nads/shards/{arch}/{first}-{stop}.log"),
    cache: True
    conda:
        CONDA_ENV
    threads: 4  # capped at --cores by Snakemake
    resources:
        gpu=RUN.gpu_job,
    params:
        job=job_of("nad_shard"),
    script:
        "../scripts/nad_shard.py"


checkpoint nad_round:
    input:
        shards=lambda w: PLAN.nad_shards(w.arch, int(w.networks)),
    output:
        path(npath.NAD_ROUND),
    log:
        logs("nads/rounds/{arch}/{networks}.log"),
    conda:
        CONDA_ENV
    params:
        job=lambda w: plain(PLAN.nad_shard_job(w.arch, 0, int(w.networks)).nads),
        min_overlap=lambda w: CFG.nad_config(w.arch).min_overlap_top10,
    script:
        "../scripts/nad_round.py"


rule nad_goal:
    output:
        path(npath.NAD_GOAL),
    log:
        logs("nads/rounds/{arch}.log"),
    localrule: True
    conda:
        CONDA_ENV
    params:
        goal=lambda w: PLAN.nad_goal(w.arch),
    script:
        "../scripts/nad_goal.py"


rule nad_converged:
    input:
        unpack(nad_rounds),
    output:
        temp(path(npath.NAD_CONVERGED)),
    log:
        logs("nads/rounds/{arch}/converged.log"),
    localrule: True
    conda:
        CONDA_ENV
    script:
        "../scripts/nad_converged.py"


rule nads:
    input:
        unpack(nad_inputs),
    output:
        multiext(path(npath.NAD), artifact=".pt", npy=".npy", summary=".json"),
    log:
        logs("nads/{arch}.log"),
    cache: True
    conda:
        CONDA_ENV
    threads: 4  # capped at --cores by Snakemake
    resources:
        gpu=lambda w: 0 if PLAN.nad_shards(w.arch) else RUN.gpu_job,  # a merge: on the CPU
    params:
        job=job_of("nads"),
    script:
        "../scripts/nads.py"


rule plot_nads:
    input:
        path(npath.NAD) + ".pt",
    output:
        report(
            path(npath.NAD_FIGURE),
            caption="../report/nads.rst",
            category="NADs",
            subcategory="per architecture",
            labels={"architecture": "{arch}", "figure": "NADs"},
        ),
    log:
        logs("nads/plots/nads_{arch}.log"),
    conda:
        CONDA_ENV
    params:
        min_overlap=lambda w: CFG.nad_config(w.arch).min_overlap_top10,
    script:
        "../scripts/plot_nads.py"


rule signatures:
    input:
        expand(path(npath.NAD) + ".npy", arch=PLAN.nad_architectures()),
    output:
        table=path(npath.SIGNATURES),
        figure=report(
            path(npath.SIGNATURE_FIGURE),
            caption="../report/signatures.rst",
            category="NADs",
            subcategory="signatures",
            labels={"architecture": "all", "figure": "signatures"},
        ),
    log:
        logs("signatures.log"),
    conda:
        CONDA_ENV
    params:
        archs=PLAN.nad_architectures(),
        shapes=lambda w: [CFG.nad_shape(a) for a in PLAN.nad_architectures()],
    script:
        "../scripts/signatures.py"
