"""nadpipe: how an architecture's neural anisotropy directions decide which of several equally
good solutions it learns (a Snakemake + PyTorch pipeline, and a library).

The version below is the one place it is stated (pyproject.toml reads it from here).
"""

__version__ = "0.13.2"
