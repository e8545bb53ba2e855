"""`nadpipe runs` and `nadpipe diff`: the results folders of a checkout, and two runs by verdict."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import folders
from .common import AS_JSON, Refused, writable


def cmd_runs(args) -> int:
    if not Path(args.directory).is_dir():
        raise Refused(f"{args.directory} is no directory")
    if args.against is not None and args.html is None:
        raise Refused("--against marks a folder on the page: give --html PAGE with it")
    if args.against is not None and not (Path(args.against) / "config.yaml").is_file():
        raise Refused(f"--against {args.against}: no results folder (it has no config.yaml)")
    if args.html is not None:
        writable(Path(args.html), {".html": "the page"}, "--html")  # before any work
    found = folders.side_by_side(args.directory)
    print(json.dumps(found, default=str) if args.json else folders.text(found))
    if args.html is not None:
        # deferred: it loads pandas and matplotlib, which importing the cli does not
        from ..report import runs_page

        runs_page(args.directory, args.html, args.against)
    return 0


def cmd_diff(args) -> int:
    for folder in (args.a, args.b):
        if not (Path(folder) / "config.yaml").is_file():
            raise Refused(f"{folder} is no results folder (it has no config.yaml)")
    if args.figure:
        writable(Path(args.figure), {".png": "the figure"}, "--figure")  # before any work
    try:
        paired = folders.cell_pairs(args.a, args.b)  # read once: the text and the figure
        found = folders.diff(args.a, args.b, paired)
    except folders.FolderError as e:
        raise Refused(str(e)) from None
    if args.figure:
        found["figures"] = folders.diff_figures(args.a, args.b, args.figure, paired)
    print(json.dumps(found, default=str) if args.json else folders.diff_text(found, args.all))
    return 0


def diff_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe diff`."""
    c.add_argument("a", help="a results folder (e.g. results)")
    c.add_argument("b", help="another (e.g. results-mine)")
    c.add_argument("--json", action="store_true", help=AS_JSON)
    c.add_argument(
        "--all",
        action="store_true",
        help="also list the cells that kept their verdict while their reliance angles moved",
    )
    c.add_argument(
        "--figure",
        metavar="PNG",
        help="also draw each D(v1) ⊕ D(v2) study's cells, A -> B: their verdicts and the change "
        "of their reliance angles (PNG; a second study's gets its name before .png)",
    )


def runs_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe runs`."""
    c.add_argument(
        "directory", nargs="?", default=".", help="where the results folders are (default .)"
    )
    c.add_argument("--json", action="store_true", help=AS_JSON)
    c.add_argument(
        "--html",
        metavar="PAGE",
        help="also write the folders side by side as an HTML page (PAGE.html)",
    )
    c.add_argument(
        "--against",
        metavar="FOLDER",
        help="with --html: mark this results folder and compare the others' cells with its",
    )
