"""What the commands share: argument types, the check of an output path, the exit status of
unconverged NADs."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import tempfile
from pathlib import Path

from ..io import program
from ..settings import Shape


def shape_type(text: str):
    try:
        c, h, w = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--shape takes C,H,W (e.g. 3,32,32), not {text!r}"
        ) from None
    if min(c, h, w) < 1:
        raise argparse.ArgumentTypeError(f"--shape {text}: C, H and W must be at least 1")
    return Shape(c, h, w)


def finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def at_least(low: int):
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than the minimum of {low}")
        return value

    return parse


def fraction(text: str) -> float:
    value = finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--kwargs is not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--kwargs takes a JSON object, e.g. '{\"hidden\": [64]}'")
    return value


DEFAULT_KS = (1, 5, 10, 20, 50, 100)  # compare's subspace sizes when -k is not given


FREQUENCY_BOUND = 10**6  # cycles per image: far beyond any image, far below an overflow


def bounded_int(low: int, high: int):
    """An argparse type: an integer from `low` to `high` (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not an integer from {low} to {high}")
        return value

    return parse


class Refused(Exception):
    """An argument the command refuses before any work; the message names the flag."""


OUT_SUFFIXES = {
    ".npy": "the NADs (rows = NADs)",
    ".npz": "the NADs as array 'nads'",
    ".pt": "the whole artifact: NADs, eigenvalues, diagnostics",
}


def writable(out: Path, suffixes: dict[str, str] = OUT_SUFFIXES, flag: str = "--out") -> None:
    """Refuse a `flag` (--out, --figure, ...) that cannot be written, before any work: a wrong
    suffix, a directory, a place this process cannot create a file in (probed there)."""
    if out.is_dir():
        example = out / f"{'nads' if flag == '--out' else 'page'}{next(iter(suffixes))}"
        raise Refused(f"{flag} {out} is a directory; give a file name, e.g. {example}")
    if out.suffix not in suffixes:
        kinds = "; ".join(f"{k}: {v}" for k, v in suffixes.items())
        raise Refused(f"{flag} {out}: use one of these suffixes ({kinds})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}."):
            pass
    except OSError as e:
        raise Refused(f"{flag} {out}: cannot write into {out.parent} ({e.strerror or e})") from e


UNCONVERGED = 3  # the exit status of --strict for NADs that did not converge


def strict_status(args, kind: str) -> int:
    """0, or UNCONVERGED under --strict when the verdict is "not converged" or "unknown" (the
    result is written either way)."""
    if args.strict and kind in ("not converged", "unknown"):
        print(
            f"nadpipe {args.command}: --strict: the NADs are {kind} (exit {UNCONVERGED})",
            file=sys.stderr,
        )
        return UNCONVERGED
    return 0


def program_here() -> list[str]:
    """How to type this command again (nadpipe.io.program); `nadpipe` when it runs in another
    program's process (a test calling `main`)."""

    here = sys.argv[0]
    known = os.path.basename(here) == "nadpipe"
    return program("nadpipe", here) if known else ["nadpipe"]


def without_option(argv: list[str], option: str) -> list[str]:
    """`argv` without `option` and its value (as `--option V` or `--option=V`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == option:
            skip = True
        elif not a.startswith(option + "="):
            out.append(a)
    return out


STRICT = (
    "exit with status 3 when the NADs are not converged or their convergence is "
    "unknown (the result is written all the same)"
)


AS_JSON = "print the result as one JSON document on stdout (for scripts)"


def square_shape(d: int):
    """The shape (1, side, side) of `d` coordinates, refused when they are not a square."""
    side = math.isqrt(d)
    if side * side != d:
        raise Refused(f"{d} coordinates are not a square image: give --shape C,H,W")
    return Shape(1, side, side)


def dotted_config(argv: list[str]) -> str | None:
    """Why a `--config` entry with a dotted key (nads.n_networks=50, Hydra's habit) in `argv`
    cannot serve, with the nested form Snakemake takes; None when there is none. Snakemake
    refuses such a key before it reads the workflow, in words that name neither."""
    config = False
    for a in argv:
        if a.startswith("-"):
            config = a in ("--config", "-C") or a.startswith("--config=")
            a = a.split("=", 1)[1] if a.startswith("--config=") else ""
        key, _, value = a.partition("=")
        if config and "." in key:
            *outer, last = key.split(".")
            nested = f"{{{last}: {value}}}"
            for k in reversed(outer[1:]):
                nested = f"{{{k}: {nested}}}"
            return (
                f"--config {a}: Snakemake takes no dotted key; give it nested, in YAML: "
                f"--config {shlex.quote(f'{outer[0]}={nested}')}"
            )
    return None
