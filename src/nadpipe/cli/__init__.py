"""The `nadpipe` command: NADs of any model without Snakemake, their figure, comparing two NAD
bases, a report of this machine for bug reports, and the table of config keys. Each command
calls the library functions the workflow calls.

One module per command or family, each with its argument parser beside it."""

from __future__ import annotations

import argparse
import errno
import os
import sys

from .. import __version__
from ..log import set_verbosity
from .common import Refused
from .compare import VERSUS, cmd_compare, cmd_versus, compare_arguments, versus_arguments
from .doctor import cmd_config, cmd_doctor, doctor_arguments
from .folders import cmd_diff, cmd_runs, diff_arguments, runs_arguments
from .nads import cmd_nads, cmd_plot_nads, nads_arguments, plot_nads_arguments
from .search import SEARCH, cmd_search, search_arguments

EXAMPLES = {
    "nads": "nadpipe nads --model lenet --n-networks 1100 --out lenet.npy\n"
    "  nadpipe nads --model mynets:small_cnn --kwargs '{\"width\": 32}' --shape 3,32,32 "
    "--n-networks 200 --out small_cnn.pt",
    "plot-nads": "nadpipe plot-nads lenet.pt --out lenet_nads.png",
    "compare": "nadpipe compare results/nads/lenet.npy NADs/LeNet_NADs.npy",
    "versus": "nadpipe versus results/single_direction/summary.parquet nads.csv --arch lenet "
    "--column-b acc_ln",
    "doctor": "nadpipe doctor",
    "config": "nadpipe config > keys.md",
    "runs": "nadpipe runs .",
    "diff": "nadpipe diff results results-mine",
    "search": "nadpipe search --configfile configs/nad_paper.yaml "
    "configs/nad_paper_lenet_search.yaml --study single_direction --arch lenet_pub "
    "--axis sigma=0.25,1,4 --cores 2",
}


def _commands() -> list[tuple]:
    """Every subcommand, in the order of `nadpipe -h`: (name, what it does, its function, what
    adds its arguments)."""
    return [  # a table: one subcommand a line
        ("nads", "Compute the NADs of a registry or user model.", cmd_nads, nads_arguments),
        (
            "plot-nads",
            "Draw the NAD figure of an artifact (.pt) or a basis (.npy).",
            cmd_plot_nads,
            plot_nads_arguments,
        ),
        (
            "compare",
            "Subspace overlaps and matching |cosines| of two NAD bases.",
            cmd_compare,
            compare_arguments,
        ),
        ("versus", VERSUS, cmd_versus, versus_arguments),
        (
            "runs",
            "Every results folder here side by side: the config keys that differ, studies, "
            "cells, what each found, when and by which version.",
            cmd_runs,
            runs_arguments,
        ),
        (
            "diff",
            "Two results folders: the keys that differ, and per cell the verdict before and after.",
            cmd_diff,
            diff_arguments,
        ),
        (
            "doctor",
            "What to paste into a bug report: versions, devices, Slurm, CIFAR-10.",
            cmd_doctor,
            doctor_arguments,
        ),
        (
            "config",
            "Print every config key with its default and meaning (markdown).",
            cmd_config,
            None,
        ),
        ("search", SEARCH, cmd_search, search_arguments),
    ]


def _verbosity(parser: argparse.ArgumentParser, default) -> None:
    """-q / -v; before or after the subcommand: the subcommand's own copy sets it only if
    given."""
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=-1,
        default=default,
        help="say only warnings and errors on stderr (no progress)",
    )
    loud.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=1,
        default=default,
        help="also debug lines (each chunk of networks, timings)",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nadpipe",
        description="Neural anisotropy directions of any model, without Snakemake "
        "(the workflow: snakemake --cores all; `search` runs it).",
    )
    p.add_argument("--version", action="version", version=f"nadpipe {__version__}")
    _verbosity(p, 0)
    talk = argparse.ArgumentParser(add_help=False)
    _verbosity(talk, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)
    for name, what, func, arguments in _commands():
        c = sub.add_parser(
            name,
            help=what,
            description=what,
            parents=[talk],
            epilog=f"example:\n  {EXAMPLES[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        c.set_defaults(func=func)
        if arguments is not None:
            arguments(c)
    return p


# options whose value may start with '-' ("--shape -1,32,32", "--snakemake '-n'"): argparse
# takes such a value for an option and says "expected one argument"; joined as --flag=value,
# the value reaches the option's own check
DASHED_VALUES = ("--shape", "--snakemake", "--offset")


def _join_dashed(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in DASHED_VALUES and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    argv = _join_dashed(sys.argv[1:] if argv is None else list(argv))
    args = parser().parse_args(argv)

    set_verbosity(args.verbosity)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a full disk or a closed pipe is told here, not at the exit
        return code
    except Refused as e:
        print(f"nadpipe {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout closed early (| head): not an error of nadpipe's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C: what was finished stays (every file is written whole)
        print(f"nadpipe {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
            raise
        # the output could not be written (a full disk, > /dev/full): said, and not again at
        # the exit, when Python would flush what is left once more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"nadpipe {args.command}: cannot write the output: {e.strerror}", file=sys.stderr)
        return 1
