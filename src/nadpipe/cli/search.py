"""`nadpipe search`: the protocol whose curve fits a published one best."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys

from .. import search as ns
from ..log import say
from .common import Refused, dotted_config, program_here, without_option


def _ties(rows: list[dict]) -> str:
    """What the search says of the protocols its noise cannot tell from the best."""
    tied = [r["protocol"] for r in rows if r.get("tied")]
    if not rows[0].get("learned", True):
        return (
            "none of the protocols' models learned (every cell's test accuracy at chance, "
            "within three standard errors): no fit here is a finding; train longer or on more "
            "data"
        )
    if tied:
        return (
            f"tied with it within the noise (two standard errors of the test sets): "
            f"{', '.join(tied)}: the data cannot rank these"
        )
    return "no other protocol lies within the noise (two standard errors of the test sets)"


def _terminated(signum, frame):
    raise ns.Terminated()


def cmd_search(args) -> int:
    try:
        extra = shlex.split(args.snakemake)
    except ValueError as e:
        raise Refused(
            f"--snakemake {args.snakemake!r}: cannot split it as a shell would ({e})"
        ) from None
    dotted = dotted_config(extra)
    if dotted:
        raise Refused(f"--snakemake: {dotted}")
    dry = [a for a in extra if a in ("-n", "--dry-run", "--dryrun") or a.startswith("--dry")]
    if dry:
        raise Refused(
            f"--snakemake {dry[0]}: a search runs its rounds for real; "
            "`nadpipe search --dry-run` says what round 1 would run"
        )
    try:
        s = ns.prepare(args.configfile, args.study, args.arch, args.axis, args.rounds, args.cores,
                       extra, args.results, args.budget_minutes, args.resume)  # fmt: skip
    except ns.SearchError as e:
        raise Refused(str(e)) from None
    if args.dry_run:
        return _dry_run(s)
    signal.signal(signal.SIGTERM, _terminated)  # `kill`: stopped as Ctrl-C stops it
    try:
        outcome = ns.sweep(s, say)
    except ns.SearchError as e:
        print(f"nadpipe search: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if outcome.stopped:
        code = _stopped(s, outcome)
        if code:
            return code
    _say_best(s, outcome.rows)
    return 0


def _stopped(s, outcome) -> int:
    """What a search the budget or the user stopped says: the table so far and the line that
    goes on from it; the exit status (0: it goes on to say the best so far)."""
    again = without_option(sys.argv[1:], "--resume")
    line = shlex.join([*program_here(), *again, "--resume", str(s.out / "search.csv")])
    if outcome.interrupted:
        print(
            f"nadpipe search: {outcome.stopped}. The table of what was measured is "
            f"{s.out}/search.csv; go on, here or on another machine, with: {line}",
            file=sys.stderr,
        )
        return 130
    if not outcome.rows:
        print(
            f"nadpipe search: stopped at its budget before a round finished "
            f"({outcome.stopped}): no protocol measured; give it more minutes",
            file=sys.stderr,
        )
        return 1
    say(
        f"stopped at its budget: {outcome.stopped}. The table of what was measured is "
        f"{s.out}/search.csv; go on, here or on another machine, with: {line}"
    )
    return 0


def _dry_run(s) -> int:
    """What round 1 of the search `s` would run, and what each later round may."""
    try:
        jobs, cost = ns.plan(s)
    except ns.SearchError as e:
        print(f"nadpipe search: {e}", file=sys.stderr)
        return 1
    n = len(ns.coarse(s.axes))
    counts = ", ".join(f"{rule} {count}" for rule, count in jobs.items()) or "nothing"
    print(
        f"round 1 would run {sum(jobs.values())} jobs ({counts}) for {n} protocol(s): "
        f"{'; '.join(ns.said(p) for p in ns.coarse(s.axes))}\n"
        f"each later round: at most {2 * len(s.axes)} protocol(s) (two midpoints per numeric "
        f"key, or one and a step outward where the best is the smallest or largest tried), "
        f"{jobs.get('train', 0) // n} train job(s) each" + (f"\nround 1: {cost}" if cost else "")
    )
    return 0


def _say_best(s, rows: list[dict]) -> None:
    """The table, the best protocol as a config entry, and where the rest lies."""
    best = rows[0]
    point = tuple((k, best[k]) for k in sorted(s.axes))
    entry = json.dumps({best["protocol"]: ns.protocol(point)})
    r = "n/a" if not math.isfinite(best["pearson"]) else f"{best['pearson']:.3f}"
    print(ns.markdown(rows, sorted(s.axes)))
    print(
        f"best: {best['protocol']} ({ns.said(point)}, round {best['round']}): mean |difference| "
        f"{best['mean_abs_diff']:.2f} points, largest {best['max_abs_diff']:.2f}, Pearson r {r}, "
        f"over {best['cells']} cells, ± {best.get('noise', math.nan):.2f} (one standard error)\n"
        f"{_ties(rows)}\n"
        f"as a protocol: {s.study}: {{protocols: {entry}}}\n"
        f"the table, the figure, the config: {s.out}/ (search.md, search.png, search.yaml)\n"
        f"every protocol's figures and report: {shlex.join(s.command('--cores', s.cores))}"
    )


def search_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe search`."""
    c.add_argument(
        "--configfile",
        nargs="+",
        default=[],
        metavar="FILE",
        help="the config files to start from, as Snakemake takes them (over ./config.yaml)",
    )
    c.add_argument(
        "--study", required=True, help="a study with `references` (single_direction, fourier)"
    )
    c.add_argument(
        "--arch",
        required=True,
        help="the architecture whose fit is searched (its STUDY.references entry)",
    )
    c.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a key and its coarse values, repeatable: a data key of the study "
        "(sigma, eps, n_train, ...) or train.NAME (train.epochs=10,20,40)",
    )
    c.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="at most this many rounds, the coarse sweep included (default 3)",
    )
    c.add_argument("--cores", default="all", help="Snakemake's --cores (default all)")
    c.add_argument(
        "--snakemake",
        default="",
        metavar="ARGS",
        help="more Snakemake options, quoted: '--profile profiles/slurm', '--resources gpu=4'",
    )
    c.add_argument(
        "--dry-run",
        "-n",
        action="store_true",
        help="print what round 1 would "
        "run (Snakemake's dry run: jobs per rule) and stop; writes no result",
    )
    c.add_argument(
        "--results", help="the results folder, a name (default: results-search-STUDY-ARCH)"
    )
    c.add_argument(
        "--budget-minutes",
        type=float,
        metavar="N",
        help="stop cleanly within N minutes: a round starts only when the seconds a training "
        "took so far say it fits, and one still running at the end is stopped (its finished "
        "cells kept); the table is written after every round",
    )
    c.add_argument(
        "--resume",
        metavar="TABLE",
        help="go on from a search's search.csv, made here or on another machine: its protocols "
        "count as measured (none is trained again), the next round refines around its best",
    )


SEARCH = (
    "Find the protocol whose curve fits a published one best: a coarse sweep over the values "
    "given per key, then rounds of refinement around the best (geometric midpoints), each round "
    "one Snakemake run of the study (cells cached across rounds); run from the checkout."
)
