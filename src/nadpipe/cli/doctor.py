"""`nadpipe doctor` and `nadpipe config`: what an install found, and the table of config keys."""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .. import __version__, acceptance, threads
from ..cifar_files import missing_files
from ..provenance import PACKAGE, source_hash
from ..runner.slots import describe, pool, slot_count, visible_gpus


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


# the packages a command needs beyond the workflow's own, and how a user gets them
NEEDED_BY = (
    ("pygments", "snakemake --report", "pip install -e . (a dependency of nadpipe)"),
    ("jinja2", "snakemake --report", "pip install -e . (through snakemake)"),
    (
        "snakemake_executor_plugin_slurm",
        "snakemake --profile profiles/slurm",
        "pip install -e '.[slurm]'",
    ),
)


def missing_packages() -> list[str]:
    """What `nadpipe doctor` says of each package a command needs that is not installed: the
    package, the command and how to install it."""

    return [
        f"{module.replace('_', '-')}, which `{command}` needs: {how}"
        for module, command, how in NEEDED_BY
        if importlib.util.find_spec(module) is None
    ]


def _threads_line() -> str:
    spin = os.environ.get("GOMP_SPINCOUNT")
    cores = threads.cores_here()
    return (
        f"torch's threads spin {spin} rounds before they sleep (nadpipe.threads); this process "
        f"may use {cores} of the machine's {os.cpu_count()} cores"
    )


def cmd_doctor(args) -> int:
    """What a bug report needs: versions, devices, GPU slots, Slurm, CIFAR-10; with --gpu, the
    acceptance check of this machine's GPU (nadpipe.acceptance)."""
    if args.gpu:
        scratch = Path(args.scratch or tempfile.mkdtemp(prefix="nadpipe-doctor-"))
        return acceptance.gpu_window(scratch)

    lines = [
        f"nadpipe {__version__} (library source {source_hash()}) at {PACKAGE}",
        f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPU cores",
        f"threads: {threads.said() or _threads_line()}",
    ]
    # deferred: it loads torch, which importing the cli does not
    import torch

    lines.append(f"torch {torch.__version__}, torchvision {_version('torchvision')}")
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        lines.append(f"CUDA {torch.version.cuda}: {len(names)} device(s): {', '.join(names)}")
    else:
        lines.append(
            f"CUDA: no device (torch built with CUDA {torch.version.cuda or 'none'}); "
            "jobs run on the CPU"
        )
        if torch.version.cuda:
            lines.append(
                "torch here is a CUDA build on a machine without a GPU: its CUDA libraries "
                "(about 3 GB) serve nothing; docs/installing.md gives the CPU-only install "
                "(pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu, "
                "before pip install -e .)"
            )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "not set")
    gpus = visible_gpus()
    slots = pool(slot_count(None, None, len(gpus)), gpus)
    if slots and not torch.cuda.is_available():  # the variable names GPUs torch cannot use
        lines.append(
            f"GPU jobs of a workflow here: CUDA_VISIBLE_DEVICES {visible} names GPU(s), but "
            "torch finds none, so a GPU job would fail (gpus.device auto refuses a GPU it was "
            "given and cannot use); unset CUDA_VISIBLE_DEVICES, or set gpus.device: cpu"
        )
    else:
        lines.append(
            f"GPU jobs of a workflow here (gpus.jobs_per_gpu 1, no --resources gpu=N): "
            f"{describe(slots)} (CUDA_VISIBLE_DEVICES {visible})"
        )
    for pkg in (
        "snakemake",
        "snakemake-executor-plugin-slurm",
        "pandas",
        "pyarrow",
        "matplotlib",
        "jsonschema",
        "pygments",
    ):
        lines.append(f"{pkg} {_version(pkg)}")
    lines += [f"MISSING: {line}" for line in missing_packages()]
    sinfo = shutil.which("sinfo")
    if sinfo:
        res = subprocess.run([sinfo, "--version"], capture_output=True, text=True, timeout=30)
        if res.returncode == 0:
            lines.append(f"Slurm: {res.stdout.strip()} ({sinfo})")
        else:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            lines.append(f"Slurm: {sinfo} is installed but reaches no cluster ({last})")
    else:
        lines.append("Slurm: not found (sinfo not on PATH); profiles/slurm needs it")
    root = args.cifar10
    missing = missing_files(root)
    lines.append(
        f"CIFAR-10 under {root!r}: "
        + ("found" if not missing else f"not found (missing {len(missing)} of 7 files)")
    )
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    lines.append(f"Chromium (report check): {chromium or 'not found'}")
    print("\n".join(lines))
    return 0


def cmd_config(args) -> int:
    # deferred: it loads jsonschema, which importing the cli does not
    from ..config import reference_table

    schema = PACKAGE.parents[1] / "workflow" / "schemas" / "config.schema.yaml"
    if not schema.exists():
        print(
            "nadpipe config: the schema lives in the checkout (workflow/schemas/); run from it",
            file=sys.stderr,
        )
        return 2
    print(reference_table(schema), end="")
    return 0


def doctor_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe doctor`."""
    c.add_argument("--cifar10", default="data/cifar10", help="where CIFAR-10 is looked for")
    c.add_argument(
        "--gpu",
        action="store_true",
        help="run the acceptance check of this "
        "machine's GPU (every job of the smoke study on CUDA against the CPU with 1 "
        "and 4 jobs per GPU, killed and resumed trainings, the benchmarks) and print "
        "the table docs/speed.md needs; without CUDA, say what it would run and exit 1",
    )
    c.add_argument("--scratch", help="where --gpu works (default: a new temporary directory)")
