"""NADs in shards: an architecture's networks computed `networks_per_shard` at a time, each
shard its networks' input sensitivities in a file of its own, then put together by one merge
that makes the basis, the eigenvalues and the diagnostics (nadpipe.nads.nads_of).

Network k is drawn under its own seed whatever computes it, and a shard's first network is a
multiple of `networks_per_chunk` (nadpipe.config.words.shard_problem), so a shard evaluates its
networks in the very chunks an unsharded run does: the merged NADs equal the unsharded ones
bit for bit on one device type (tests/test_shards.py). Shards are named by their networks,
FIRST-STOP: raising n_networks leaves every earlier full shard as it is, and only the new
ones (and a last, partial one) are computed.

`until_converged`: shards are added in rounds, the networks doubling from the first round (the
fewest whole shards with at least MIN_NETWORKS networks and a rank above every NAD index used)
up to n_networks, until the split-half top-10 overlap reaches `min_overlap_top10`, or the
spectrum is nearly isotropic from more samples than coordinates (`converged`: the verdict of
nadpipe.convergence). The workflow asks after each round (a Snakemake checkpoint, nad_round).

Torch is imported by the functions that compute: the plan (grid.Plan) reads `ranges` and
`rounds` while Snakemake parses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .convergence import verdict
from .io import load_torch
from .provenance import provenance
from .settings import MIN_NETWORKS, ModelSpec, NadSettings, Shape, plain


def ranges(n_networks: int, size: int) -> list[tuple[int, int]]:
    """The shards (first, stop) of networks 0 .. n_networks - 1, `size` networks each (the
    last one fewer when size does not divide n_networks)."""
    return [(a, min(a + size, n_networks)) for a in range(0, n_networks, size)]


def rounds(size: int, ceiling: int, floor: int = MIN_NETWORKS) -> list[int]:
    """The networks after each round of `until_converged`: the fewest whole shards of `size`
    with at least `floor` networks, then doubling, up to `ceiling` (the last round)."""
    n = min(math.ceil(max(floor, 1) / size) * size, ceiling)
    out = [n]
    while n < ceiling:
        n = min(2 * n, ceiling)
        out.append(n)
    return out


def key(model: ModelSpec, settings: NadSettings) -> dict:
    """What every shard of one set of NADs must share: the model and the settings but the
    number of networks (which only says how many shards there are)."""
    s = plain(settings)
    s.pop("n_networks")
    return {"model": plain(model), "settings": s}


def compute(
    build: Callable,
    model: ModelSpec,
    settings: NadSettings,
    shape: Shape,
    first: int,
    stop: int,
    device: Any = "cpu",
    progress: bool = True,
    born: Any = None,
    kept: str | None = None,
) -> dict:
    """The shard of networks first .. stop - 1: their sensitivities ((stop - first) *
    n_points, d), float64 on the CPU, with what they were made from. `kept`: where finished
    chunks are kept (nadpipe.nads.sample_sensitivities)."""
    # deferred: it loads torch, which importing shards does not
    from .nads import as_network, sample_sensitivities

    g = sample_sensitivities(
        as_network(build, shape, settings),
        replace(settings, n_networks=stop - first),
        shape,
        device,
        progress,
        born=born,
        first=first,
        kept=kept,
    )
    return {
        "sensitivities": g,
        "first": first,
        "stop": stop,
        "key": key(model, settings),
        "shape": list(shape),
        "provenance": provenance(),
    }


class ShardError(RuntimeError):
    """Shards that cannot be put together; the message names the file and what to do."""


def gather(paths: list[str], model: ModelSpec, settings: NadSettings) -> Any:
    """The sensitivities of networks 0 .. n - 1 from the shards at `paths` (in any order), as one
    (n * n_points, d) float64 tensor, after checking that every shard was made for `model` and
    `settings` and that together they cover 0 .. n - 1 once."""
    # deferred: it loads torch, which importing shards does not
    import torch

    want = key(model, settings)
    shards = []
    for path in paths:
        shard = load_torch(path)
        if not isinstance(shard, dict) or "sensitivities" not in shard:
            raise ShardError(f"{path} is no NAD shard (nadpipe.shards)")
        if shard["key"] != want:
            differ = sorted(
                f"{part}.{k}"
                for part in ("model", "settings")
                for k in set(want[part]) | set(shard["key"][part])
                if want[part].get(k) != shard["key"][part].get(k)
            )
            raise ShardError(
                f"{path} holds the sensitivities of other networks or another estimator than "
                f"these NADs ask for (differing: {', '.join(differ)}); delete it and compute "
                "it again"
            )
        shards.append((shard["first"], shard["stop"], path, shard["sensitivities"]))
    shards.sort()
    at = 0
    for first, stop, path, _ in shards:
        if first != at:
            what = f"networks {at} to {first - 1} are in no shard" if first > at else "overlaps"
            raise ShardError(f"{path} (networks {first} to {stop - 1}): {what}")
        at = stop
    rows = sum(len(g) for *_, g in shards)
    d = shards[0][3].shape[1] if shards else 0
    out = torch.empty(rows, d, dtype=torch.float64)
    row = 0
    for *_, g in shards:
        out[row : row + len(g)] = g
        row += len(g)
    return out


def converged(g: Any, n_points: int, min_overlap: float) -> dict:
    """Whether the sensitivities `g` of some networks give NADs that need no more networks,
    as nadpipe.convergence judges any NADs: converged (split-half top-10 overlap at least
    `min_overlap`), or nearly isotropic from more samples than coordinates (no order to find,
    however many networks). The round's record: `networks`, `overlap_top10`, `verdict`,
    `converged` (either of the two)."""
    # deferred: it loads torch, which importing shards does not
    from .nads import isotropy, nads_from_sensitivities, split_half

    sh = split_half(g, n_points)
    top = nads_from_sensitivities(g, 1)[0][0].item()
    more = "not converged: more networks in a next round, where nads.n_networks leaves one"
    kind, text = verdict({"split_half": sh, "isotropy": isotropy(g, top)}, min_overlap, more)
    overlap = sh["overlap"].get(10, float("nan"))
    return {
        "networks": len(g) // n_points,
        "overlap_top10": overlap,
        "min_overlap_top10": min_overlap,
        "verdict": kind,
        "said": text,
        "converged": kind in ("converged", "isotropic"),
    }
