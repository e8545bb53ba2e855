"""Whether an architecture's NADs converged, from the diagnostics an artifact or its record
holds (split-half overlaps, anisotropy): one verdict for the job log, the NAD figure, the report
and the `nadpipe` command, each saying in its own words what to do. Needs no torch."""

from __future__ import annotations

import math

from .usage import clock

ISOTROPIC_BELOW = 1.5  # anisotropy under which a spectrum counts as nearly isotropic


def networks(art: dict) -> int:
    """How many networks an artifact's NADs (or their JSON record) come from: its settings'
    n_networks, unless they were computed until converged (nadpipe.shards), which stops
    earlier and records how many it took."""
    return art.get("networks") or art["settings"]["n_networks"]


def forecast(sh: dict, target: float) -> int | None:
    """How many networks a split-half top-10 overlap of `target` needs, read from the split-half
    curve (nadpipe.nads.split_half: the overlap of the first n/8, n/4, n/2 and all n networks).
    The overlap of a direction that stands above the noise grows as n / (n + n0): its logit is
    log(n / n0), a line of slope 1 in log n, drawn through the curve's largest point. Only where
    the curve rises (a least-squares slope above 0 over two points or more strictly between 0
    and 1); None otherwise. Measured on LeNet (docs/trust.md): from 200 networks, 0.5 near 940,
    where 1 100 gave 0.50."""
    points = sorted(
        (int(m), v) for m, v in (sh.get("curve") or {}).items() if v is not None and 0 < v < 1
    )
    if not points or not 0 < target < 1:
        return None
    xs = [math.log(m) for m, _ in points]
    ys = [math.log(v / (1 - v)) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    rise = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    if len(points) > 1 and rise <= 0:
        return None
    n, v = points[-1]
    return math.ceil(n * (target / (1 - target)) / (v / (1 - v)) - 1e-9)  # 800.0000001: 800


def _round(n: int) -> str:
    """A forecast's count, to two significant figures: 1 100, 48 000."""
    digits = max(len(str(n)) - 2, 0)
    return f"{round(n, -digits):,}".replace(",", " ")


def forecast_said(art: dict, target: float) -> str:
    """The forecast as the verdict says it: the curve, the networks the target needs and, from
    what a network cost the job that made the NADs, the time here ("" when none)."""
    sh = art.get("split_half") or {}
    needed = forecast(sh, target)
    if needed is None:
        return ""
    curve = sorted((int(m), v) for m, v in (sh.get("curve") or {}).items() if v is not None)
    points = ", ".join(f"{v:.2f} at {m}" for m, v in curve)
    said = f"its split-half curve ({points}) reaches {target} near {_round(needed)} networks"
    per = art.get("seconds_per_network")
    if per:
        said += f", about {clock(per * needed)} here"
    return said


def verdict(art: dict, min_overlap: float, raise_networks: str) -> tuple[str, str]:
    """(kind, text) of an artifact's convergence: "converged" (split-half top-10 overlap at
    least `min_overlap`), "isotropic" (a flat spectrum: no order of its NADs to find, whatever
    the overlap), "not converged" or "unknown" (both worth a warning). `raise_networks` is how
    the interface says to use more networks (e.g. "raise nads.n_networks (now 40)")."""
    sh = art["split_half"]  # keys are numbers in an artifact, text in its JSON record
    top10 = {int(k): v for k, v in sh["overlap"].items()}.get(10, float("nan"))
    top10 = float("nan") if top10 is None else top10
    undefined = {int(k): v for k, v in sh["undefined"].items()}
    iso = art.get("isotropy")
    if not math.isfinite(top10):  # too few networks to judge anything
        why = undefined.get(10, "too few networks")
        return "unknown", f"convergence unknown: {why}; {raise_networks}"
    if top10 >= min_overlap:
        return "converged", f"split-half top-10 overlap {top10:.2f}"
    flat = iso and math.isfinite(iso["anisotropy"]) and iso["anisotropy"] < ISOTROPIC_BELOW
    full = iso and iso.get("samples", 0) > iso.get("d", math.inf)
    if flat and not full:  # a direction must stand far above the bulk to show from few samples
        return "not converged", (
            f"split-half top-10 overlap {top10:.2f} < {min_overlap}, and from "
            f"{iso['samples']} samples of {iso['d']} coordinates a flat spectrum cannot be "
            f"told from one these networks cannot resolve (anisotropy {iso['anisotropy']:.2f}); "
            f"{raise_networks}, above {iso['d']}"
        )
    if flat:
        n = sum(sh["halves"])
        return "isotropic", (
            f"nearly isotropic: its top eigenvalue is {iso['anisotropy']:.2f} x the largest an "
            f"isotropic covariance shows from {n} networks (below {ISOTROPIC_BELOW}), so there "
            f"is no order of its NADs to find and a low split-half overlap ({top10:.2f} at "
            "k = 10) is expected, not a sign of too few networks"
        )
    ahead = forecast_said(art, min_overlap)
    return "not converged", (
        f"split-half top-10 overlap {top10:.2f} < {min_overlap}: not converged (anisotropy "
        f"{iso['anisotropy']:.2f}, not a flat spectrum); {raise_networks}"
        if iso
        else f"split-half top-10 overlap {top10:.2f} < {min_overlap}: not converged; "
        f"{raise_networks}"
    ) + (f"; {ahead}" if ahead else "")
