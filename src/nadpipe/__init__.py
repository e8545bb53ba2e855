"""nadpipe: how an architecture's neural anisotropy directions decide what it learns."""

__version__ = "0.1.0"
