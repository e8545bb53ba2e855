"""NAD bases in and out: read a basis from a file (validated), compare two bases.

A basis is a (k, d) array whose rows are NADs, NAD 0 first: the format of nadpipe's
results/nads/{arch}.npy and of the NAD repository's NADs/*_NADs.npy.
"""

from __future__ import annotations

import math
import os

import numpy as np

ORTHONORMAL_TOL = 1e-3  # largest |V V^T - I| entry a basis file may have
KS = (1, 5, 10, 20, 50, 100)


class BasisError(ValueError):
    """A NAD basis file cannot be used; the message names the key or file and why."""


def _array(path: str) -> np.ndarray:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        return np.load(path, allow_pickle=False)
    if ext == ".npz":
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            pick = next((n for n in ("nads", "vectors", "NADs") if n in names), None)
            if pick is None and len(names) == 1:
                pick = names[0]
            if pick is None:
                raise BasisError(f"holds arrays {names}; name the NADs 'nads' or keep one array")
            return z[pick]
    if ext == ".pt":
        # deferred: it loads torch, which importing bases does not
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(obj, dict):  # a nadpipe NAD artifact
            obj = obj.get("vectors")
        if not isinstance(obj, torch.Tensor):
            raise BasisError("holds no tensor (nor a dict with 'vectors')")
        return obj.double().numpy()
    raise BasisError(f"unknown extension {ext!r}: use .npy, .npz or .pt")


def read_basis(path: str | os.PathLike, d: int | None = None, key: str | None = None) -> np.ndarray:
    """The (k, d) basis in `path` as float64, rows = NADs; checked to be finite, of `d` columns
    (when given; (k, C, H, W) and (k, H, W) arrays are flattened) and orthonormal within
    ORTHONORMAL_TOL. `key` (a config key) is named in the error."""
    where = f"config key {key!r}: " if key else ""
    path = str(path)
    if not os.path.isfile(path):
        raise BasisError(f"{where}no file {path!r}")
    try:
        v = np.asarray(_array(path), dtype=np.float64)
    except BasisError as e:
        raise BasisError(f"{where}{path}: {e}") from e
    except Exception as e:  # noqa: BLE001 -- a corrupt file can fail in any reader's layer
        raise BasisError(f"{where}{path} cannot be read ({type(e).__name__}: {e})") from e
    if v.ndim > 2:
        v = v.reshape(v.shape[0], -1)
    if v.ndim != 2 or v.shape[0] == 0:
        raise BasisError(f"{where}{path} holds an array of shape {v.shape}, not (k, d) rows")
    if d is not None and v.shape[1] != d:
        hint = " (are the NADs its columns? rows are NADs)" if v.shape[0] == d else ""
        raise BasisError(
            f"{where}{path} has rows of {v.shape[1]} coordinates, but the inputs have {d}{hint}"
        )
    if not np.isfinite(v).all():
        raise BasisError(f"{where}{path} holds {int((~np.isfinite(v)).sum())} non-finite values")
    if v.shape[0] > v.shape[1]:
        raise BasisError(f"{where}{path} has {v.shape[0]} rows of {v.shape[1]}: not a basis")
    err = np.abs(v @ v.T - np.eye(v.shape[0])).max()
    if err > ORTHONORMAL_TOL:
        raise BasisError(
            f"{where}{path}: its rows are not orthonormal (largest |V V^T - I| entry {err:.2g} > "
            f"{ORTHONORMAL_TOL}); are the NADs the rows (not the columns)?"
        )
    return v


def read_nad_file(path: str, shape, key: str | None = None) -> np.ndarray:
    """A basis for inputs of `shape` (C, H, W) (nadpipe.settings.Shape)."""
    return read_basis(path, shape[0] * shape[1] * shape[2], key)


def subspace_overlap(u: np.ndarray, v: np.ndarray, k: int) -> float:
    """||U_k V_k^T||_F^2 / k of the first k rows: 1 for the same subspace, ~k/d for random."""
    return float(np.square(u[:k] @ v[:k].T).sum() / k)


def compare(a: np.ndarray, b: np.ndarray, ks: tuple[int, ...] = KS) -> dict:
    """Subspace overlaps of the first k NADs of two bases and the |cosine| of NAD i of one with
    NAD i of the other, for every i both have."""
    if a.shape[1] != b.shape[1]:
        raise BasisError(f"the bases have rows of {a.shape[1]} and {b.shape[1]} coordinates")
    n = min(len(a), len(b))
    return {
        "d": a.shape[1],
        "rows": (len(a), len(b)),
        "overlap": {k: subspace_overlap(a, b, k) for k in ks if k <= n},
        "cosine": np.abs((a[:n] * b[:n]).sum(1)),
        "random": {k: k / a.shape[1] for k in ks if k <= n},
    }


def report(result: dict, first: int = 10) -> str:
    """The comparison as text: overlaps per k against the chance level, then |cosines|."""
    lines = [f"{result['rows'][0]} and {result['rows'][1]} NADs of d = {result['d']}"]
    short = [f"{'AB'[i]} holds {r}" for i, r in enumerate(result["rows"]) if r < result["d"]]
    if short:  # the published bases have d - 1 rows (their PCA drops the last direction)
        lines.append(
            f"  {' and '.join(short)} of the {result['d']} NADs (the first ones, indices "
            f"0 to {min(result['rows']) - 1} compared; the NAD paper's published bases leave "
            "out the last)"
        )
    lines.append("k       overlap   (random bases: k/d)")
    for k, v in result["overlap"].items():
        lines.append(f"{k:<7d} {v:7.3f}   ({result['random'][k]:.3f})")
    cos = result["cosine"]
    lines.append(
        "|cos| of matching NADs: " + ", ".join(f"{i}: {c:.2f}" for i, c in enumerate(cos[:first]))
    )
    if len(cos) > first:
        q = np.quantile(cos, [0.5, 0.9])
        lines.append(f"  median over all {len(cos)}: {q[0]:.2f}, 90th percentile {q[1]:.2f}")
    return "\n".join(lines)


def as_json(result: dict) -> dict:
    """The comparison as plain JSON values (`nadpipe compare --json`)."""
    return {
        "d": result["d"],
        "rows": list(result["rows"]),
        "overlap": {str(k): v for k, v in result["overlap"].items()},
        "random": {str(k): v for k, v in result["random"].items()},
        "cosine": [float(c) for c in result["cosine"]],
    }


def finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)
