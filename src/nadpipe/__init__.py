"""nadpipe: how an architecture's neural anisotropy directions decide which of several equally
good solutions it learns (a Snakemake + PyTorch pipeline, and a library).

The version below is the one place it is stated (pyproject.toml reads it from here).
"""

__version__ = "0.15.0"

from . import threads  # noqa: E402  -- first: torch must not load before this

threads.settle()  # how torch's threads wait and how many, before any module loads torch
