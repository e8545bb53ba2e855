"""`nadpipe nads` and `nadpipe plot-nads`: NADs of any model without Snakemake, and their figure."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from .. import threads
from ..backend import Backend, DeviceError, setup
from ..convergence import verdict
from ..estimators import ESTIMATORS, described
from ..io import ArtifactError, atomic_write, load_torch, save_torch
from ..log import say, warn
from ..provenance import provenance, source_digest
from ..settings import ModelSpec, NadSettings, Shape, plain
from ..shards import ShardError, compute, gather, ranges
from .common import (
    OUT_SUFFIXES,
    STRICT,
    Refused,
    at_least,
    finite,
    fraction,
    json_object,
    shape_type,
    square_shape,
    strict_status,
    writable,
)


def _settings(args) -> NadSettings:
    return NadSettings(
        estimator=args.estimator,
        step=args.step,
        n_networks=args.n_networks,
        n_points=args.n_points,
        seed=args.seed,
        windowed=not args.no_windows,
        top_k=args.top_k,
        networks_per_chunk=args.networks_per_chunk,
    )


def cmd_nads(args) -> int:
    # deferred: they load torch and jsonschema, which importing the cli does not
    from ..config.words import FLAGS, nad_problem, shard_problem
    from ..models import KwargsError, ModelError, build, check_model
    from ..nads import NadError, compute_nads, nads_of

    settings = _settings(args)
    spec = ModelSpec(args.model, args.kwargs, args.shape, 1, source_digest(args.model))
    out = Path(args.out) if args.out else None
    try:  # every argument before any work
        why = nad_problem(settings, args.shape, FLAGS) or shard_problem(
            settings, args.networks_per_shard, False, FLAGS
        )
        if why:
            raise Refused(why)
        shard_arguments(args)
        if out is not None:
            writable(out)
        device = setup(Backend(device=args.device), flag="--device")
        check_model(spec)
    except KwargsError as e:
        raise Refused(f"{'--kwargs' if args.kwargs else '--model'}: {e}") from e
    except ModelError as e:
        raise Refused(f"--model: {e}") from e
    except DeviceError as e:
        raise Refused(str(e)) from e
    say(f"NADs of {spec.describe()} with {settings} on {device}")
    if threads.said():
        say(threads.said())
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
    return strict_status(args, verdict(art, 0.5, "")[0])


def shard_arguments(args) -> None:
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

    # deferred: it loads torch, which importing the cli does not
    from ..models import build

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


def _save_nads(art: dict, spec, settings, out: Path) -> None:
    # deferred: it loads numpy, which importing the cli does not
    import numpy as np

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
    # deferred: they load matplotlib and numpy, which importing the cli does not
    from ..bases import BasisError, read_basis
    from ..plots_nads import nad_figure

    path = Path(args.file)
    try:
        if path.suffix == ".pt":
            art = load_torch(path)
            if not isinstance(art, dict) or "vectors" not in art:
                raise Refused(f"{path} holds no NADs (a .pt of nadpipe nads, or results/nads/)")
        else:
            # deferred: it loads torch, which importing the cli does not
            import torch

            vectors = torch.from_numpy(read_basis(path)).float()
            shape = args.shape or square_shape(vectors.shape[1])
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
    writable(Path(out), {".png": "the figure", ".pdf": "the figure", ".svg": "the figure"})
    n = (art.get("settings") or {}).get("n_networks")
    again = f"compute them again with a larger --n-networks (now {n})"
    name = args.name or art.get("arch") or path.stem  # an artifact knows its architecture
    said, _ = nad_figure(art, name, out, args.min_overlap, again)
    (warn if said.startswith("WARNING: ") else say)(said.removeprefix("WARNING: "))
    say(f"wrote {out}")
    return strict_status(args, "" if not args.strict else verdict(art, args.min_overlap, "")[0])


def nads_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe nads`."""
    d = NadSettings()
    c.add_argument(
        "--model",
        required=True,
        help="registry name (lenet, resnet18, ...) or package.module:callable",
    )
    c.add_argument(
        "--kwargs", type=json_object, default={}, help="builder keyword arguments as JSON"
    )
    c.add_argument(
        "--shape", type=shape_type, default=Shape(1, 32, 32), help="input C,H,W (default 1,32,32)"
    )
    c.add_argument(
        "--estimator",
        choices=tuple(ESTIMATORS),
        default=d.estimator,
        help=f"{described()} (default {d.estimator})",
    )
    c.add_argument("--step", type=finite, default=d.step, help=f"dipole step h (default {d.step})")
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
        type=at_least(0),
        metavar="K",
        help="compute shard K (from 0) "
        "into --shards and stop: spread the shards over machines, then run the "
        "command again without --shard to put them together",
    )
    c.add_argument(
        "--out", help=".npy (rows = NADs) or .pt (the full artifact); needed unless --shard"
    )
    c.add_argument("--strict", action="store_true", help=STRICT)


def plot_nads_arguments(c: argparse.ArgumentParser) -> None:
    """The arguments of `nadpipe plot-nads`."""
    c.add_argument("file", help="a .pt artifact (nadpipe nads, results/nads/) or a basis")
    c.add_argument("--out", help="the PNG (default: FILE with .png)")
    c.add_argument(
        "--shape", type=shape_type, help="C,H,W of a basis that is not a square 1-channel image"
    )
    c.add_argument("--name", help="the architecture's name in the title")
    c.add_argument(
        "--min-overlap",
        type=fraction,
        default=0.5,
        help="the convergence warning's threshold (0 to 1)",
    )
    c.add_argument(
        "--strict",
        action="store_true",
        help=STRICT + "; refused for a basis (.npy, .npz), which holds no convergence diagnostic",
    )
