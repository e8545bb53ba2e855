"""`nadpipe compare` and `nadpipe versus`: two NAD bases side by side, results against a
published curve or map."""

from __future__ import annotations

import argparse
import json
import sys

from ..io import ArtifactError, load_parquet
from ..settings import Reference
from .common import AS_JSON, DEFAULT_KS, FREQUENCY_BOUND, Refused, at_least, bounded_int


def cmd_compare(args) -> int:
    # deferred: it loads numpy, which importing the cli does not
    from ..bases import BasisError, as_json, compare, read_basis, report

    try:
        a, b = read_basis(args.a), read_basis(args.b)
        if a.shape[1] == b.shape[1] and args.k is not None:  # asked for: each k must exist
            rows = min(len(a), len(b))
            over = [k for k in args.k if k > rows]
            if over:
                raise Refused(
                    f"-k {' '.join(map(str, over))}: the bases have {len(a)} and "
                    f"{len(b)} NADs, so k can be at most {rows}"
                )
        result = compare(a, b, tuple(args.k or DEFAULT_KS))
        print(json.dumps(as_json(result)) if args.json else report(result, first=args.first))
    except BasisError as e:
        print(f"nadpipe compare: {e}", file=sys.stderr)
        return 2
    return 0


def _curves(path: str, args, column: str | None, flag: str) -> tuple[str | None, dict]:
    """(study, name -> accuracies in %) of a summary.parquet (per protocol) or a CSV."""
    # deferred: it loads pandas, which importing the cli does not
    from ..references import ReferenceError, comparable, ours, read

    if path.endswith(".parquet"):
        try:
            df = load_parquet(path)
        except ArtifactError as e:
            raise Refused(str(e)) from e
        study = df["study"].iloc[0]
        archs = list(dict.fromkeys(df["arch"]))
        arch = args.arch or (archs[0] if len(archs) == 1 else None)
        if arch not in archs:
            raise Refused(f"--arch: {path} holds {', '.join(archs)}; say which ({args.arch!r}?)")
        if study not in comparable():
            raise Refused(
                f"{path} is a {study} summary: versus compares the results of "
                f"{' or '.join(comparable())}"
            )
        return study, ours(df[df["arch"] == arch], study)
    study = args.study
    if study is None:
        return None, {}
    ref = Reference(path, column, args.index, args.a, args.b, args.offset, args.scale)
    try:
        return study, {"": read(ref, study, flag if column else path)}
    except ReferenceError as e:
        said = str(e).replace("config key ", "")
        said = said.replace("the reference's column, index, a and b", f"{flag}, --index, --a, --b")
        raise Refused(said) from e


def cmd_versus(args) -> int:
    # deferred: it loads pandas, which importing the cli does not
    from ..references import ReferenceError, agreement, comparable, in_common, line

    if args.reference.endswith(".parquet") and not args.results.endswith(".parquet"):
        raise Refused(
            f"{args.reference} is a summary and {args.results} is not: the results come first, "
            f"the reference second (nadpipe versus {args.reference} {args.results} ...)"
        )
    study, mine = _curves(args.results, args, args.column_a, "--column-a")
    args.study = args.study or study
    study_b, theirs = _curves(args.reference, args, args.column_b, "--column-b")
    if not mine or not theirs:
        raise Refused(f"--study: say {' or '.join(comparable())} (no summary.parquet names it)")
    if len(theirs) > 1 and args.protocol_b not in theirs:
        given = f"--protocol-b {args.protocol_b!r} is none of them; " if args.protocol_b else ""
        raise Refused(
            f"{args.reference} holds {len(theirs)} protocols ({', '.join(theirs)}): a reference "
            f"is one curve; {given}say which with --protocol-b NAME"
        )
    ref = theirs[args.protocol_b] if len(theirs) > 1 else next(iter(theirs.values()))
    results = []
    for name, series in mine.items():
        try:
            in_common(ref, series.index, args.reference)
        except ReferenceError as e:
            raise Refused(
                str(e).replace(
                    ": no cell in common with the study", f": no cell in common with {args.results}"
                )
            ) from e
        results.append((name, agreement(series, ref)))
    if args.json:  # NaN (no correlation below 3 cells) as null
        plain = [
            {"protocol": n, **{k: v if v == v else None for k, v in a.items()}} for n, a in results
        ]
        print(json.dumps({"study": args.study, "results": plain}))
    for name, a in [] if args.json else results:
        print(line(name, a))
    return 0


def compare_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe compare`."""
    c.add_argument("a", help="a NAD basis: .npy/.npz/.pt with rows = NADs, or a nadpipe artifact")
    c.add_argument("b", help="the other basis, of the same input size")
    c.add_argument(
        "-k",
        type=at_least(1),
        nargs="+",
        help="subspace sizes, each at most the smaller basis's NADs (default: those of "
        f"{' '.join(map(str, DEFAULT_KS))} that both bases have)",
    )
    c.add_argument("--first", type=at_least(0), default=10, help="matching NADs listed one by one")
    c.add_argument("--json", action="store_true", help=AS_JSON)


def versus_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe versus`."""
    c.add_argument("results", help="a study's summary.parquet (each protocol) or a CSV")
    c.add_argument("reference", help="a CSV (e.g. the NAD paper's nads.csv) or a summary.parquet")
    c.add_argument("--arch", help="the architecture of a summary that holds several")
    c.add_argument("--column-a", help="the accuracy column of RESULTS when it is a CSV")
    c.add_argument("--column-b", help="the accuracy column of REFERENCE when it is a CSV")
    c.add_argument(
        "--protocol-b", help="the protocol of REFERENCE when it is a summary that holds several"
    )
    # deferred: it loads pandas, which importing the cli does not
    from ..references import comparable

    c.add_argument(
        "--study", choices=comparable(), help="what two CSVs hold (a summary says it itself)"
    )
    c.add_argument("--index", default="index", help="a CSV's NAD-index column (default index)")
    c.add_argument("--a", default="x", help="a CSV's frequency-a column (default x)")
    c.add_argument("--b", default="y", help="a CSV's frequency-b column (default y)")
    c.add_argument(
        "--offset",
        type=bounded_int(-FREQUENCY_BOUND, FREQUENCY_BOUND),
        default=0,
        help="added to a CSV's frequencies (-8 for the NAD paper's dft_accuracies.csv)",
    )
    c.add_argument(
        "--scale",
        type=bounded_int(1, FREQUENCY_BOUND),
        default=1,
        help="multiplies a CSV's frequencies after --offset, into cycles per image "
        "(2 for dft_accuracies.csv)",
    )
    c.add_argument("--json", action="store_true", help=AS_JSON)


VERSUS = (
    "How far results are from a published curve or map: per protocol, the mean and largest "
    "|difference| in accuracy points and the Pearson correlation."
)
