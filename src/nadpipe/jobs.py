"""One function per pipeline job; the workflow scripts are thin calls into these."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from functools import partial

import pandas as pd
import torch

from .data import PairSpec, load_pair_data, write_pair_spec
from .evaluate import evaluate_conditions
from .io import atomic_write, derive_seed, load_torch, pick_device, save_json, save_torch
from .models import build_model
from .nads import NadSettings, compute_nads
from .train import TrainSettings, init_seed, train_model


def nads_job(output: str, model: str, kwargs: dict, settings: dict) -> None:
    """Compute and store one architecture's NADs (networks with 1 input channel, 1 logit)."""
    device = pick_device()
    s = NadSettings(**settings)
    print(f"NADs of {model} {kwargs or ''}: {s} on {device}", flush=True)
    art = compute_nads(partial(build_model, model, 1, 1, kwargs), s, device)
    art.update(model=model, kwargs=kwargs)
    save_torch(art, output)
    top = ", ".join(f"{v:.3g}" for v in art["eigenvalues"][:5].tolist())
    print(f"done in {art['seconds']:.1f}s; top eigenvalues {top}", flush=True)


def pair_dataset_job(
    nads: str, output: str, arch: str, nad_source: str, i: int, j: int, seed: int, data: dict
) -> None:
    """Write the spec of cell (arch, i, j, seed): v1 = NAD i, v2 = NAD j of `nad_source`."""
    art = load_torch(nads)
    spec = PairSpec(
        v1=art["vectors"][i].clone(),
        v2=art["vectors"][j].clone(),
        seed=derive_seed("pair", i, j, seed),
        **data,
    )
    meta = {
        "arch": arch,
        "nad_i": i,
        "nad_j": j,
        "seed": seed,
        "nad_source": nad_source,
        **{f"nad_{k}": v for k, v in art["settings"].items()},
    }
    digest = write_pair_spec(spec, output, meta)
    print(f"cell {meta} -> sha256 {digest[:16]}", flush=True)


def train_pair_job(
    dataset: str, model_out: str, metrics_out: str, model: str, kwargs: dict, train: dict
) -> None:
    """Train one model of a NAD-pair cell; save its weights and its per-epoch history."""
    device = pick_device()
    splits, stored = load_pair_data(dataset)
    meta = stored["meta"]
    x, y = (t.to(device) for t in splits["train"])
    settings = TrainSettings(**train)
    key = (meta["arch"], meta["nad_i"], meta["nad_j"])
    init_seed(meta["seed"], *key)
    net = build_model(model, x.shape[1], 2, kwargs).to(device)
    print(f"train {meta['arch']} i={key[1]} j={key[2]} seed={meta['seed']} on {device}: {settings}")
    start = time.perf_counter()
    history = train_model(net, x, y, settings, derive_seed("order", meta["seed"], *key))
    save_torch(net.state_dict(), model_out)
    save_json(
        {
            "train": train,
            "model": model,
            "kwargs": kwargs,
            "history": history,
            "train_seconds": time.perf_counter() - start,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "host": platform.node(),
        },
        metrics_out,
    )


def evaluate_pair_job(
    dataset: str, weights: str, metrics: str, output: str, batch_size: int
) -> None:
    """Evaluate one trained model in and out of distribution; write its rows as parquet."""
    device = pick_device()
    splits, stored = load_pair_data(dataset)
    with open(metrics) as f:
        run = json.load(f)
    net = build_model(run["model"], 2, 2, run["kwargs"])
    net.load_state_dict(load_torch(weights))
    net.to(device)
    rows = evaluate_conditions(
        net, {k: (x.to(device), y.to(device)) for k, (x, y) in splits.items()}, batch_size
    )
    spec = stored["spec"]
    key = {"study": "nad_pairs", **stored["meta"]}
    settings = {
        **{k: spec[k] for k in ("eps1", "eps2", "sigma", "n_train", "n_test")},
        "model": run["model"],
        **run["train"],
        "final_train_loss": run["history"][-1]["loss"],
        "train_seconds": run["train_seconds"],
        "device": run["device"],
    }
    df = pd.DataFrame([{**key, **r, **settings} for r in rows])
    atomic_write(output, partial(df.to_parquet, index=False))
    print(df[["split", "condition", "accuracy", "loss"]].to_string(index=False))


def aggregate_job(inputs: Sequence[str], output: str) -> None:
    """Concatenate per-cell result tables into one parquet, sorted by key."""
    df = pd.concat([pd.read_parquet(p) for p in inputs], ignore_index=True)
    keys = ["arch", "nad_i", "nad_j", "seed", "split", "condition"]
    df = df.sort_values(keys, kind="stable").reset_index(drop=True)
    atomic_write(output, partial(df.to_parquet, index=False))
    print(f"{len(df)} rows from {len(inputs)} cells -> {output}")
