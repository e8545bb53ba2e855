# The data of every study are built by the jobs that need them, from small specs (nadpipe.grid)
# and the NADs; only CIFAR-10 comes from outside, downloaded here when cifar10.download is on.
if CFG.cifar10.download:

    rule cifar10_download:
        output:
            PLAN.cifar_files(),
        log:
            logs("cifar10_download.log"),
        conda:
            CONDA_ENV
        params:
            root=lambda w, output: os.path.dirname(os.path.dirname(output[0])),
        script:
            "../scripts/cifar10_download.py"
