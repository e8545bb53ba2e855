"""Download CIFAR-10 with torchvision (only when cifar10.download is on)."""

from nadpipe.cifar import download_cifar10
from nadpipe.runner.worker import job_log

with job_log(snakemake.log[0]):
    download_cifar10(snakemake.params.root)
