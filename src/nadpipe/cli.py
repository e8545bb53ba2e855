"""The `nadpipe` command: NADs of any model without Snakemake, their figure, comparing two NAD
bases, a report of this machine for bug reports, and the table of config keys. Each command
calls the library functions the workflow calls."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__, acceptance, runs
from .backend import Backend, DeviceError, setup
from .cifar_files import missing_files
from .convergence import verdict
from .convergence import verdict as convergence
from .estimators import ESTIMATORS, described
from .io import ArtifactError, load_parquet, load_torch, program, save_torch
from .log import say, set_verbosity
from .provenance import provenance, source_digest, source_hash
from .runner.slots import describe, pool, slot_count, visible_gpus
from .settings import ModelSpec, NadSettings, Reference, Shape, plain
from .shards import ShardError, compute, gather, ranges

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


def _shape(text: str):

    try:
        c, h, w = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--shape takes C,H,W (e.g. 3,32,32), not {text!r}"
        ) from None
    if min(c, h, w) < 1:
        raise argparse.ArgumentTypeError(f"--shape {text}: C, H and W must be at least 1")
    return Shape(c, h, w)


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def _at_least(low: int):
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


def _fraction(text: str) -> float:
    value = _finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _json(text: str) -> dict:
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


def _writable(out: Path, suffixes: dict[str, str] = OUT_SUFFIXES) -> None:
    """Refuse an --out that cannot be written, before any work: a wrong suffix, a directory, a
    place this process cannot create a file in (probed by creating one there)."""

    if out.is_dir():
        example = out / f"nads{next(iter(suffixes))}"
        raise Refused(f"--out {out} is a directory; give a file name, e.g. {example}")
    if out.suffix not in suffixes:
        kinds = "; ".join(f"{k}: {v}" for k, v in suffixes.items())
        raise Refused(f"--out {out}: use one of these suffixes ({kinds})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}."):
            pass
    except OSError as e:
        raise Refused(f"--out {out}: cannot write into {out.parent} ({e.strerror or e})") from e


def cmd_nads(args) -> int:

    # deferred: it loads jsonschema, which importing cli does not
    from .config.words import FLAGS, nad_problem, shard_problem

    # deferred: it loads torch, which importing cli does not
    from .models import KwargsError, ModelError, build, check_model

    # deferred: it loads torch, which importing cli does not
    from .nads import NadError, compute_nads, nads_of

    settings = NadSettings(
        estimator=args.estimator,
        step=args.step,
        n_networks=args.n_networks,
        n_points=args.n_points,
        seed=args.seed,
        windowed=not args.no_windows,
        top_k=args.top_k,
        networks_per_chunk=args.networks_per_chunk,
    )
    spec = ModelSpec(args.model, args.kwargs, args.shape, 1, source_digest(args.model))
    out = Path(args.out) if args.out else None
    try:  # every argument before any work
        why = nad_problem(settings, args.shape, FLAGS) or shard_problem(
            settings, args.networks_per_shard, False, FLAGS
        )
        if why:
            raise Refused(why)
        _shard_arguments(args)
        if out is not None:
            _writable(out)
        device = setup(Backend(device=args.device), flag="--device")
        check_model(spec)
    except KwargsError as e:
        raise Refused(f"{'--kwargs' if args.kwargs else '--model'}: {e}") from e
    except ModelError as e:
        raise Refused(f"--model: {e}") from e
    except DeviceError as e:
        raise Refused(str(e)) from e
    say(f"NADs of {spec.describe()} with {settings} on {device}")
    advice = "raise --n-networks (now {n})"
    try:
        if args.shards is None:
            art = compute_nads(partial(build, spec), settings, args.shape, device, advice=advice)
        else:
            paths = _nad_shards(args, spec, settings, device)
            if args.shard is not None:
                return 0
            g = gather(paths, spec, settings)
            art = nads_of(g, settings, args.shape, device, advice=advice)
    except (NadError, ShardError) as e:
        print(f"nadpipe nads: {e}", file=sys.stderr)
        return 1
    _save_nads(art, spec, settings, out)
    n = len(art["vectors"])
    say(f"wrote {n} NADs of d = {args.shape.d} to {out} ({OUT_SUFFIXES[out.suffix]})")
    return _strict(args, verdict(art, 0.5, "")[0])


def _shard_arguments(args) -> None:
    """Refuse shard flags that do not go together, before any work."""
    if (args.shards is None) != (args.networks_per_shard is None):
        raise Refused(
            "--shards DIR and --networks-per-shard N go together: the folder of the "
            "shards and how many networks each has"
        )
    if args.shard is not None:
        if args.shards is None:
            raise Refused("--shard K needs --shards DIR and --networks-per-shard N")
        count = -(-args.n_networks // args.networks_per_shard)
        if args.shard >= count:
            raise Refused(
                f"--shard {args.shard}: {args.n_networks} networks in shards of "
                f"{args.networks_per_shard} are shards 0 to {count - 1}"
            )
    elif args.out is None:
        raise Refused("--out FILE is needed (the NADs), unless --shard K computes one shard")
    if args.shards is not None:
        folder = Path(args.shards)
        if folder.exists() and not folder.is_dir():
            raise Refused(f"--shards {folder} is a file; give a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Refused(f"--shards {folder}: cannot create it ({e.strerror or e})") from e


def _nad_shards(args, spec, settings, device) -> list[str]:
    """The shards of --shards: --shard K computed (again), or every missing one computed and
    those there kept; their paths, in order."""

    # deferred: it loads torch, which importing cli does not
    from .models import build

    todo = ranges(args.n_networks, args.networks_per_shard)
    paths = [str(Path(args.shards) / f"{a}-{b}.pt") for a, b in todo]
    for k, ((first, stop), path) in enumerate(zip(todo, paths, strict=True)):
        if args.shard is not None and k != args.shard:
            continue
        if args.shard is None and Path(path).exists():
            say(f"shard {k} (networks {first} to {stop - 1}): kept, {path}")
            continue
        say(f"shard {k} of {len(todo)} (networks {first} to {stop - 1})")
        save_torch(
            compute(partial(build, spec), spec, settings, args.shape, first, stop, device), path
        )
        say(f"wrote {path}")
    return paths


UNCONVERGED = 3  # the exit status of --strict for NADs that did not converge


def _strict(args, kind: str) -> int:
    """0, or UNCONVERGED under --strict when the verdict is "not converged" or "unknown" (the
    result is written either way)."""
    if args.strict and kind in ("not converged", "unknown"):
        print(
            f"nadpipe {args.command}: --strict: the NADs are {kind} (exit {UNCONVERGED})",
            file=sys.stderr,
        )
        return UNCONVERGED
    return 0


def _save_nads(art: dict, spec, settings, out: Path) -> None:
    # deferred: it loads numpy, which importing cli does not
    import numpy as np

    from .io import atomic_write, save_torch

    vectors = art["vectors"].numpy()
    if out.suffix == ".pt":
        record = {
            "model": plain(spec),
            "settings": plain(settings),
            "file": None,
            "file_sha256": None,
            "arch": spec.model,
            "provenance": provenance(),
        }
        save_torch({**art, **record}, out)
    else:  # through a file object: numpy would append its own suffix to a name

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.save(f, vectors) if out.suffix == ".npy" else np.savez(f, nads=vectors)

        atomic_write(out, write)


def cmd_plot_nads(args) -> int:
    # deferred: it loads numpy, which importing cli does not
    from .bases import BasisError, read_basis
    from .log import say, warn

    # deferred: it loads matplotlib, which importing cli does not
    from .plots import nad_figure

    path = Path(args.file)
    try:
        if path.suffix == ".pt":
            art = load_torch(path)
            if not isinstance(art, dict) or "vectors" not in art:
                raise Refused(f"{path} holds no NADs (a .pt of nadpipe nads, or results/nads/)")
        else:
            # deferred: it loads torch, which importing cli does not
            import torch

            vectors = torch.from_numpy(read_basis(path)).float()
            shape = args.shape or _square(vectors.shape[1])
            art = {"vectors": vectors, "eigenvalues": None, "shape": list(shape), "file": str(path)}
    except (ArtifactError, BasisError) as e:
        raise Refused(str(e)) from e
    if args.strict and art.get("split_half") is None:
        raise Refused(
            f"--strict: {path} holds no convergence diagnostic (a basis, or NADs read "
            "from a file), so there is nothing to be strict about"
        )
    d = art["vectors"].shape[1]
    if args.shape:
        if args.shape.d != d:
            raise Refused(
                f"--shape {','.join(map(str, args.shape))} has {args.shape.d} "
                f"coordinates, but the NADs of {path} have {d}"
            )
        art["shape"] = list(args.shape)
    out = args.out or str(path.with_suffix(".png"))
    _writable(Path(out), {".png": "the figure", ".pdf": "the figure", ".svg": "the figure"})
    n = (art.get("settings") or {}).get("n_networks")
    again = f"compute them again with a larger --n-networks (now {n})"
    name = args.name or art.get("arch") or path.stem  # an artifact knows its architecture
    verdict, _ = nad_figure(art, name, out, args.min_overlap, again)
    (warn if verdict.startswith("WARNING: ") else say)(verdict.removeprefix("WARNING: "))
    say(f"wrote {out}")
    return _strict(args, "" if not args.strict else convergence(art, args.min_overlap, "")[0])


def _square(d: int):

    side = math.isqrt(d)
    if side * side != d:
        raise Refused(f"{d} coordinates are not a square image: give --shape C,H,W")
    return Shape(1, side, side)


def cmd_compare(args) -> int:
    # deferred: it loads numpy, which importing cli does not
    from .bases import BasisError, as_json, compare, read_basis, report

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
    # deferred: it loads pandas, which importing cli does not
    from .references import ReferenceError, comparable, ours, read

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
    # deferred: it loads pandas, which importing cli does not
    from .references import ReferenceError, agreement, comparable, in_common, line

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


def cmd_doctor(args) -> int:
    """What a bug report needs: versions, devices, GPU slots, Slurm, CIFAR-10; with --gpu, the
    acceptance check of this machine's GPU (nadpipe.acceptance)."""
    if args.gpu:
        scratch = Path(args.scratch or tempfile.mkdtemp(prefix="nadpipe-doctor-"))
        return acceptance.run(scratch)

    lines = [
        f"nadpipe {__version__} (library source {source_hash()}) at {Path(__file__).parent}",
        f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPU cores",
    ]
    # deferred: it loads torch, which importing cli does not
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
    # deferred: it loads jsonschema, which importing cli does not
    from .config import reference_table

    schema = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
    if not schema.exists():
        print(
            "nadpipe config: the schema lives in the checkout (workflow/schemas/); run from it",
            file=sys.stderr,
        )
        return 2
    print(reference_table(schema), end="")
    return 0


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


def _program() -> list[str]:
    """How to type this command again (nadpipe.io.program); `nadpipe` when it runs in another
    program's process (a test calling `main`)."""

    here = sys.argv[0]
    known = os.path.basename(here) == "nadpipe"
    return program("nadpipe", here) if known else ["nadpipe"]


def _without(argv: list[str], option: str) -> list[str]:
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


def cmd_search(args) -> int:

    # deferred: it loads yaml, which importing cli does not
    from . import search as ns

    try:
        extra = shlex.split(args.snakemake)
    except ValueError as e:
        raise Refused(
            f"--snakemake {args.snakemake!r}: cannot split it as a shell would ({e})"
        ) from None
    dry = [a for a in extra if a in ("-n", "--dry-run", "--dryrun") or a.startswith("--dry")]
    if dry:
        raise Refused(
            f"--snakemake {dry[0]}: a search runs its rounds for real; "
            "`nadpipe search --dry-run` says what round 1 would run"
        )
    try:
        s = ns.prepare(
            args.configfile,
            args.study,
            args.arch,
            args.axis,
            args.rounds,
            args.cores,
            extra,
            args.results,
            args.budget_minutes,
            args.resume,
        )
    except ns.SearchError as e:
        raise Refused(str(e)) from None
    if args.dry_run:
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
            f"{jobs.get('train', 0) // n} train job(s) each"
            + (f"\nround 1: {cost}" if cost else "")
        )
        return 0
    try:
        outcome = ns.run(s, say)
    except ns.SearchError as e:
        print(f"nadpipe search: {e}", file=sys.stderr)
        return 1
    rows = outcome.rows
    if outcome.stopped:
        again = _without(sys.argv[1:], "--resume")
        line = shlex.join([*_program(), *again, "--resume", str(s.out / "search.csv")])
        if not rows:
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
    return 0


STRICT = (
    "exit with status 3 when the NADs are not converged or their convergence is "
    "unknown (the result is written all the same)"
)
AS_JSON = "print the result as one JSON document on stdout (for scripts)"


def _nads_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe nads`."""
    from .settings import NadSettings, Shape

    d = NadSettings()
    c.add_argument(
        "--model",
        required=True,
        help="registry name (lenet, resnet18, ...) or package.module:callable",
    )
    c.add_argument("--kwargs", type=_json, default={}, help="builder keyword arguments as JSON")
    c.add_argument(
        "--shape", type=_shape, default=Shape(1, 32, 32), help="input C,H,W (default 1,32,32)"
    )
    c.add_argument(
        "--estimator",
        choices=tuple(ESTIMATORS),
        default=d.estimator,
        help=f"{described()} (default {d.estimator})",
    )
    c.add_argument("--step", type=_finite, default=d.step, help=f"dipole step h (default {d.step})")
    c.add_argument(
        "--n-networks",
        type=int,
        default=d.n_networks,
        help=f"random networks, at least 22 (default {d.n_networks}, the paper's)",
    )
    c.add_argument(
        "--n-points", type=int, default=d.n_points, help="random points x0 pooled (default 1)"
    )
    c.add_argument(
        "--seed", type=int, default=d.seed, help="seeds x0 and every network (default 0)"
    )
    c.add_argument(
        "--top-k", type=int, default=None, help="keep the first k NADs (needed above 4096 inputs)"
    )
    c.add_argument(
        "--no-windows", action="store_true", help="dipole: every probe through the whole network"
    )
    c.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto (default): CUDA when torch sees a GPU, else the CPU",
    )
    c.add_argument(
        "--networks-per-chunk",
        type=int,
        default=d.networks_per_chunk,
        help=f"networks built together (bounds memory; default {d.networks_per_chunk})",
    )
    c.add_argument(
        "--networks-per-shard",
        type=int,
        help="compute the networks in shards of "
        "this many (a multiple of --networks-per-chunk), kept in --shards",
    )
    c.add_argument(
        "--shards",
        metavar="DIR",
        help="the folder of the shards: those there are "
        "reused, the missing ones computed, then all put together into --out",
    )
    c.add_argument(
        "--shard",
        type=_at_least(0),
        metavar="K",
        help="compute shard K (from 0) "
        "into --shards and stop: spread the shards over machines, then run the "
        "command again without --shard to put them together",
    )
    c.add_argument(
        "--out", help=".npy (rows = NADs) or .pt (the full artifact); needed unless --shard"
    )
    c.add_argument("--strict", action="store_true", help=STRICT)


def _plot_nads_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe plot-nads`."""
    c.add_argument("file", help="a .pt artifact (nadpipe nads, results/nads/) or a basis")
    c.add_argument("--out", help="the PNG (default: FILE with .png)")
    c.add_argument(
        "--shape", type=_shape, help="C,H,W of a basis that is not a square 1-channel image"
    )
    c.add_argument("--name", help="the architecture's name in the title")
    c.add_argument(
        "--min-overlap",
        type=_fraction,
        default=0.5,
        help="the convergence warning's threshold (0 to 1)",
    )
    c.add_argument(
        "--strict",
        action="store_true",
        help=STRICT + "; refused for a basis (.npy, .npz), which holds no convergence diagnostic",
    )


def _compare_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe compare`."""
    c.add_argument("a", help="a NAD basis: .npy/.npz/.pt with rows = NADs, or a nadpipe artifact")
    c.add_argument("b", help="the other basis, of the same input size")
    c.add_argument(
        "-k",
        type=_at_least(1),
        nargs="+",
        help="subspace sizes, each at most the smaller basis's NADs (default: those of "
        f"{' '.join(map(str, DEFAULT_KS))} that both bases have)",
    )
    c.add_argument("--first", type=_at_least(0), default=10, help="matching NADs listed one by one")
    c.add_argument("--json", action="store_true", help=AS_JSON)


def _versus_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe versus`."""
    c.add_argument("results", help="a study's summary.parquet (each protocol) or a CSV")
    c.add_argument("reference", help="a CSV (e.g. the NAD paper's nads.csv) or a summary.parquet")
    c.add_argument("--arch", help="the architecture of a summary that holds several")
    c.add_argument("--column-a", help="the accuracy column of RESULTS when it is a CSV")
    c.add_argument("--column-b", help="the accuracy column of REFERENCE when it is a CSV")
    c.add_argument(
        "--protocol-b", help="the protocol of REFERENCE when it is a summary that holds several"
    )
    # deferred: it loads pandas, which importing cli does not
    from .references import comparable

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


def _doctor_arguments(c: argparse.ArgumentParser) -> None:
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


def _search_arguments(c: argparse.ArgumentParser) -> None:
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
VERSUS = (
    "How far results are from a published curve or map: per protocol, the mean and largest "
    "|difference| in accuracy points and the Pearson correlation."
)


def cmd_runs(args) -> int:

    if not Path(args.directory).is_dir():
        raise Refused(f"{args.directory} is no directory")
    found = runs.side_by_side(args.directory)
    print(json.dumps(found, default=str) if args.json else runs.text(found))
    return 0


def cmd_diff(args) -> int:

    for folder in (args.a, args.b):
        if not (Path(folder) / "config.yaml").is_file():
            raise Refused(f"{folder} is no results folder (it has no config.yaml)")
    paired = runs.cell_pairs(args.a, args.b)  # read once: the text and the figure
    found = runs.diff(args.a, args.b, paired)
    if args.figure:
        found["figures"] = runs.diff_figures(args.a, args.b, args.figure, paired)
    print(json.dumps(found, default=str) if args.json else runs.diff_text(found))
    return 0


def _diff_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe diff`."""
    c.add_argument("a", help="a results folder (e.g. results)")
    c.add_argument("b", help="another (e.g. results-mine)")
    c.add_argument("--json", action="store_true", help=AS_JSON)
    c.add_argument(
        "--figure",
        metavar="PNG",
        help="also draw each D(v1) ⊕ D(v2) study's cells, A -> B: their verdicts and the change "
        "of their reliance angles (PNG; a second study's gets its name before .png)",
    )


def _runs_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe runs`."""
    c.add_argument(
        "directory", nargs="?", default=".", help="where the results folders are (default .)"
    )
    c.add_argument("--json", action="store_true", help=AS_JSON)


def _commands() -> list[tuple]:
    """Every subcommand, in the order of `nadpipe -h`: (name, what it does, its function, what
    adds its arguments)."""
    return [  # a table: one subcommand a line
        ("nads", "Compute the NADs of a registry or user model.", cmd_nads, _nads_arguments),
        (
            "plot-nads",
            "Draw the NAD figure of an artifact (.pt) or a basis (.npy).",
            cmd_plot_nads,
            _plot_nads_arguments,
        ),
        (
            "compare",
            "Subspace overlaps and matching |cosines| of two NAD bases.",
            cmd_compare,
            _compare_arguments,
        ),
        ("versus", VERSUS, cmd_versus, _versus_arguments),
        (
            "runs",
            "Every results folder here side by side: the config keys that differ, studies, "
            "cells, what each found, when and by which version.",
            cmd_runs,
            _runs_arguments,
        ),
        (
            "diff",
            "Two results folders: the keys that differ, and per cell the verdict before and after.",
            cmd_diff,
            _diff_arguments,
        ),
        (
            "doctor",
            "What to paste into a bug report: versions, devices, Slurm, CIFAR-10.",
            cmd_doctor,
            _doctor_arguments,
        ),
        (
            "config",
            "Print every config key with its default and meaning (markdown).",
            cmd_config,
            None,
        ),
        ("search", SEARCH, cmd_search, _search_arguments),
    ]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nadpipe",
        description="Neural anisotropy directions of any model, without Snakemake "
        "(the workflow: snakemake --cores all; `search` runs it).",
    )

    p.add_argument("--version", action="version", version=f"nadpipe {__version__}")

    # -q / -v before or after the subcommand: the subcommand's own copy sets it only if given
    def verbosity(parser: argparse.ArgumentParser, default) -> None:
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

    verbosity(p, 0)
    talk = argparse.ArgumentParser(add_help=False)
    verbosity(talk, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, func):
        c = sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[talk],
            epilog=f"example:\n  {EXAMPLES[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        c.set_defaults(func=func)
        return c

    for name, what, func, arguments in _commands():
        c = command(name, what, func)
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


if __name__ == "__main__":
    sys.exit(main())
