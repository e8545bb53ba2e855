"""One function per pipeline job; the workflow scripts are thin calls into these."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd
import torch

from . import geometry as geo
from . import studies
from .data import SIDE, PairSpec, checksum, load_pair_data, write_pair_spec
from .ensemble import train_ensemble
from .evaluate import evaluate_conditions
from .io import (
    ArtifactError,
    atomic_write,
    derive_seed,
    generator,
    load_json,
    load_parquet,
    load_torch,
    pick_device,
    run_facts,
    save_json,
    save_torch,
)
from .models import build_model
from .nads import NadSettings, compute_nads
from .train import TrainSettings, diverged_epoch, init_seed, train_model

# per-model facts that differ from run to run: kept out of summary.parquet so that the same
# config gives a byte-identical summary on CPU
RUN_FACTS = ["host", "slurm_job_id", "cuda_visible_devices"]  # of the training job
RUN_COLUMNS = ["train_seconds", "analysis_seconds", *RUN_FACTS]
MODEL_KEY = ["study", "arch", "nad_i", "nad_j", "seed"]


def nads_job(output: str, model: str, kwargs: dict, settings: dict) -> str:
    """Compute and store one architecture's NADs (networks with 1 input channel, 1 logit)."""
    device = pick_device()
    s = NadSettings(**settings)
    print(f"NADs of {model} {kwargs or ''}: {s} on {device}", flush=True)
    art = compute_nads(partial(build_model, model, 1, 1, kwargs), s, device)
    art.update(model=model, kwargs=kwargs)
    save_torch(art, output)
    top = ", ".join(f"{v:.3g}" for v in art["eigenvalues"][:5].tolist())
    print(f"done in {art['seconds']:.1f}s; top eigenvalues {top}", flush=True)
    return f"NADs of {model}: {s.n_networks} networks, {s.estimator}, {art['seconds']:.1f}s"


def _save_trained(
    net: torch.nn.Module,
    history: list[dict],
    weights: str,
    metrics: str,
    seconds: float,
    device: torch.device,
    record: dict,
) -> int | None:
    """Write a trained model's weights and its training record (`record`, then the outcome and
    where it ran); return the epoch it diverged in, or None."""
    at = diverged_epoch(history)
    save_torch(net.state_dict(), weights)
    save_json(
        {
            **record,
            "history": history,
            "diverged": at is not None,
            "diverged_epoch": at,
            "train_seconds": seconds,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            **run_facts(),
        },
        metrics,
    )
    return at


def _remove_checkpoints(ckpt: str) -> None:
    """Delete a training's checkpoint (and any temporary file of it): its outputs are complete."""
    for leftover in glob.glob(glob.escape(ckpt) + "*"):
        os.remove(leftover)


def check_nads(art: dict, path: str, expected: dict) -> None:
    """Stop when a NAD artifact was computed for another model or other settings than the
    config asks for (possible when Snakemake's params trigger is off, e.g. --rerun-triggers
    mtime, or a file was copied in)."""
    found = {
        "model": art.get("model"),
        "kwargs": art.get("kwargs"),
        "settings": art.get("settings"),
    }
    if found != expected:
        diff = {
            k: (found[k], expected[k]) for k in expected if found.get(k) != expected[k]
        }  # fmt: skip
        raise ArtifactError(
            f"{path} was computed with other settings than the config asks for "
            f"(found, expected): {diff}. Rebuild it with: snakemake --cores all --force {path}"
        )


def pair_dataset_job(
    nads: str,
    output: str,
    arch: str,
    nad_source: str,
    i: int,
    j: int,
    seed: int,
    data: dict,
    nad_params: dict,
) -> str:
    """Write the spec of cell (arch, i, j, seed): v1 = NAD i, v2 = NAD j of `nad_source`."""
    art = load_torch(nads)
    check_nads(art, nads, nad_params)
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
    return f"dataset {arch} i={i} j={j} seed={seed}: sha256 {digest[:12]}"


def train_pair_job(
    datasets: Sequence[str],
    model_outs: Sequence[str],
    metrics_outs: Sequence[str],
    model: str,
    kwargs: dict,
    train: dict,
) -> str:
    """Train the models of a NAD-pair cell, one per dataset (seed); several seeds train together
    as one batched ensemble. Saves each model's weights and per-epoch history."""
    device = pick_device()
    loaded = [load_pair_data(d) for d in datasets]
    metas = [stored["meta"] for _, stored in loaded]
    # (seeds, n, 2, 32, 32) and (seeds, n)
    xs = torch.stack([splits["train"][0] for splits, _ in loaded]).to(device)
    ys = torch.stack([splits["train"][1] for splits, _ in loaded]).to(device)
    settings = TrainSettings(**train)
    nets, order_seeds = [], []
    for meta in metas:
        key = (meta["arch"], meta["nad_i"], meta["nad_j"])
        init_seed(meta["seed"], *key)
        nets.append(build_model(model, xs.shape[2], 2, kwargs).to(device))
        order_seeds.append(derive_seed("order", meta["seed"], *key))
    seeds = [m["seed"] for m in metas]
    print(f"train {key[0]} i={key[1]} j={key[2]} seeds={seeds} on {device}: {settings}", flush=True)
    # not a declared output: Snakemake keeps it when it cleans up after a killed job
    ckpt = f"{model_outs[0]}.ckpt"
    start = time.perf_counter()
    if len(nets) == 1:
        histories = [train_model(nets[0], xs[0], ys[0], settings, order_seeds[0], checkpoint=ckpt)]
    else:
        histories = train_ensemble(nets, xs, ys, settings, order_seeds, checkpoint=ckpt)
    seconds = (time.perf_counter() - start) / len(nets)  # each model's share
    record = {"train": train, "model": model, "kwargs": kwargs, "trained_with_seeds": len(nets)}
    outputs = zip(nets, histories, model_outs, metrics_outs, strict=True)
    diverged_at = [
        _save_trained(net, history, weights, metrics, seconds, device, record)
        for net, history, weights, metrics in outputs
    ]
    _remove_checkpoints(ckpt)
    losses = " ".join(f"{h[-1]['loss']:.4f}" for h in histories)
    accs = " ".join(f"{h[-1]['train_accuracy']:.3f}" for h in histories)
    div = sum(e is not None for e in diverged_at)
    return (
        f"train {key[0]} i={key[1]} j={key[2]} seeds={seeds}: loss {losses}, "
        f"train acc {accs}, {seconds:.1f}s/model on {device}" + (f", {div} DIVERGED" if div else "")
    )


def _load_trained(metrics: str, weights: str, device: torch.device) -> tuple[torch.nn.Module, dict]:
    """The trained model of a cell, in eval mode on `device`, and its training record."""
    run = load_json(metrics)
    shape = run.get("in_channels", 2), run.get("num_classes", 2)
    net = build_model(run["model"], *shape, run["kwargs"])
    net.load_state_dict(load_torch(weights))
    return net.to(device).eval(), run


def _run_columns(run: dict) -> dict:
    """The columns every evaluation row of a trained model carries from its training record."""
    return {
        "model": run["model"],
        **run["train"],
        "final_train_loss": run["history"][-1]["loss"],
        "diverged": run["diverged"],
        "diverged_epoch": run["diverged_epoch"] or 0,  # 0: did not diverge
        "train_seconds": run["train_seconds"],
        "device": run["device"],
        **{k: run.get(k, "") for k in RUN_FACTS},
    }


def _unless_diverged(rows: list[dict], run: dict) -> list[dict]:
    """A diverged model's rows with NaN accuracy and loss (argmax of NaN weights would report a
    meaningless accuracy)."""
    if not run["diverged"]:
        return rows
    return [{**r, "accuracy": float("nan"), "loss": float("nan")} for r in rows]


def _cell_key(stored: dict) -> dict:
    return {"study": "nad_pairs", **stored["meta"]}


def evaluate_pair_job(
    dataset: str, weights: str, metrics: str, output: str, batch_size: int
) -> str:
    """Evaluate one trained model in and out of distribution; write its rows as parquet."""
    device = pick_device()
    splits, stored = load_pair_data(dataset)
    net, run = _load_trained(metrics, weights, device)
    rows = evaluate_conditions(
        net, {k: (x.to(device), y.to(device)) for k, (x, y) in splits.items()}, batch_size
    )
    rows = _unless_diverged(rows, run)
    spec = stored["spec"]
    settings = {
        **{k: spec[k] for k in ("eps1", "eps2", "sigma", "n_train", "n_test")},
        **_run_columns(run),
    }
    df = pd.DataFrame([{**_cell_key(stored), **r, **settings} for r in rows])
    atomic_write(output, partial(df.to_parquet, index=False))
    print(df[["split", "condition", "accuracy", "loss"]].to_string(index=False))
    test = df[df["split"] == "test"].set_index("condition")["accuracy"]
    m = stored["meta"]
    return (
        f"evaluate {m['arch']} i={m['nad_i']} j={m['nad_j']} seed={m['seed']}: test accuracy "
        f"both {test['both']:.3f}, ch1 only {test['ch1_only']:.3f}, ch2 only {test['ch2_only']:.3f}"
    )


def analyze_pair_job(
    dataset: str, weights: str, metrics: str, table: str, sections: str, settings: dict
) -> str:
    """Geometry and complexity of one trained model: one parquet row and its cross-sections."""
    device = pick_device()
    splits, stored = load_pair_data(dataset)
    net, run = _load_trained(metrics, weights, device)
    spec, s = stored["spec"], settings
    zero = torch.zeros(SIDE, SIDE)
    u1 = torch.stack([spec["v1"].reshape(SIDE, SIDE), zero]).to(device)  # v1 (+) 0
    u2 = torch.stack([zero, spec["v2"].reshape(SIDE, SIDE)]).to(device)  # 0 (+) v2
    x_test, y_test = (t[: s["n_points"]].to(device) for t in splits["test"])
    x_train = splits["train"][0][: s["n_points"]].to(device)
    start = time.perf_counter()
    row = {**_cell_key(stored), **geo.channel_reliance(net, x_test, u1, u2)}
    for name, u in (("v1", u1), ("v2", u2)):
        m = geo.margins_along(net, x_test, u, s["margin_max"], s["margin_steps"], s["batch_size"])
        row[f"margin_{name}"] = m.median().item()
    row["jacobian_norm_test"] = geo.jacobian_norm(net, x_test, s["batch_size"])
    row["jacobian_norm_train"] = geo.jacobian_norm(net, x_train, s["batch_size"])
    meta = stored["meta"]
    gen = generator(
        "trajectories", s["seed"], meta["arch"], meta["nad_i"], meta["nad_j"], meta["seed"]
    )
    tr = s["transitions"]
    row.update(
        geo.transition_counts(net, x_test, y_test, tr["n_trajectories"], tr["n_points"], gen)
    )
    if run["diverged"]:  # NaN weights: margins and transition counts would read as numbers
        key = _cell_key(stored)
        row.update({k: float("nan") for k in row if k not in key})
    row["analysis_seconds"] = time.perf_counter() - start
    cs = s["cross_section"]
    grid = torch.linspace(-cs["range"], cs["range"], cs["resolution"])
    a, b = grid * spec["eps1"], grid * spec["eps2"]
    values = geo.cross_section(
        net, x_test[: cs["n_points"]], u1, u2, a.to(device), b.to(device), s["batch_size"]
    )

    def write_sections(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez_compressed(
                f,
                values=values.cpu().numpy(),  # (points, R, R): rows along v2, columns along v1
                a=grid.numpy(),  # coordinates along v1 in units of eps1
                b=grid.numpy(),  # coordinates along v2 in units of eps2
                labels=y_test[: cs["n_points"]].cpu().numpy(),
                nad_i=meta["nad_i"],
                nad_j=meta["nad_j"],
            )

    atomic_write(sections, write_sections)
    atomic_write(table, partial(pd.DataFrame([row]).to_parquet, index=False))
    print("\n".join(f"{k}: {v}" for k, v in row.items()))
    return (
        f"analyze {meta['arch']} i={meta['nad_i']} j={meta['nad_j']} seed={meta['seed']}: "
        f"reliance {row['reliance_deg']:.0f} deg, Jacobian norm {row['jacobian_norm_test']:.3g}, "
        f"transitions {row['transitions_same_class']:.0f}/{row['transitions_diff_class']:.0f}/"
        f"{row['transitions_random']:.0f}"
    )


def aggregate_job(
    evaluations: Sequence[str],
    analyses: Sequence[str],
    output: str,
    runs: str,
    key: Sequence[str] = tuple(MODEL_KEY),
) -> str:
    """Concatenate per-cell result rows, add each model's analysis columns, sort by the model
    `key`; the models' timings go to `runs`, one row per model."""
    key = list(key)
    df = pd.concat([load_parquet(p) for p in evaluations], ignore_index=True)
    if analyses:
        extra = pd.concat([load_parquet(p) for p in analyses], ignore_index=True)
        extra = extra[key + [c for c in extra.columns if c not in df.columns]]
        df = df.merge(extra, on=key, how="left", validate="many_to_one")
    df = df.sort_values([*key[1:], "split", "condition"], kind="stable")
    timing = [c for c in RUN_COLUMNS if c in df]
    per_model = df[key + timing].drop_duplicates(key).reset_index(drop=True)
    df = df.drop(columns=timing).reset_index(drop=True)
    atomic_write(output, partial(df.to_parquet, index=False))
    atomic_write(runs, partial(per_model.to_parquet, index=False))
    return f"{len(df)} rows from {len(evaluations)} cells -> {output}; timings -> {runs}"


# -- the per-model studies (CIFAR-10: cifar_nad, poison, flip; single_direction, fourier) -----

STUDY_KEY = ["study", "arch", "variant", "seed"]


def _study_data(
    nads: str | None,
    nad_params: dict | None,
    study: str,
    variant: str,
    seed: int,
    data: dict,
    cifar10: dict | None,
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """The study's train and test tensors, and the NAD vectors they were built from (None for
    a study without NADs)."""
    vectors = None
    if nads is not None:
        art = load_torch(nads)
        check_nads(art, nads, nad_params)
        vectors = art["vectors"]
    return studies.study_data(study, variant, seed, data, cifar10, vectors), vectors


def train_study_job(
    nads: str | None,
    model_out: str,
    metrics_out: str,
    study: str,
    arch: str,
    variant: str,
    seed: int,
    model: str,
    kwargs: dict,
    train: dict,
    data: dict,
    cifar10: dict | None,
    nad_params: dict | None,
) -> str:
    """Train one model of a per-model study (`variant`: see nadpipe.config.StudyCell) and save
    its weights and per-epoch history."""
    device = pick_device()
    splits, _ = _study_data(nads, nad_params, study, variant, seed, data, cifar10)
    x, y = (t.to(device) for t in splits["train"])
    in_channels, num_classes = studies.SHAPES[study]
    init_seed(seed, study, arch, variant)
    net = build_model(model, in_channels, num_classes, kwargs).to(device)
    settings = TrainSettings(**train)
    print(f"train {study} {arch} {variant} seed={seed} on {device}: {len(x)} images, {settings}")
    start = time.perf_counter()
    history = train_model(
        net,
        x,
        y,
        settings,
        derive_seed("order", study, seed, arch, variant),
        checkpoint=f"{model_out}.ckpt",  # kept by Snakemake when a killed job is cleaned up
    )
    seconds = time.perf_counter() - start
    record = {
        "train": train,
        "model": model,
        "kwargs": kwargs,
        "in_channels": in_channels,
        "num_classes": num_classes,
        "data": data,
        "data_sha256": checksum(splits),
    }
    at = _save_trained(net, history, model_out, metrics_out, seconds, device, record)
    _remove_checkpoints(f"{model_out}.ckpt")
    last = history[-1]
    return (
        f"train {study} {arch} {variant} seed={seed}: loss {last['loss']:.4f}, train acc "
        f"{last['train_accuracy']:.3f}, {seconds:.1f}s on {device}"
        + (f", DIVERGED in epoch {at}" if at is not None else "")
    )


def evaluate_study_job(
    nads: str | None,
    weights: str,
    metrics: str,
    output: str,
    study: str,
    arch: str,
    variant: str,
    seed: int,
    data: dict,
    cifar10: dict | None,
    nad_params: dict | None,
    batch_size: int,
    n_points: int,
) -> str:
    """Evaluate one trained model of a per-model study under the study's conditions; cifar_nad
    models also get the reliance on v against the CIFAR channels (input gradients)."""
    device = pick_device()
    splits, vectors = _study_data(nads, nad_params, study, variant, seed, data, cifar10)
    net, run = _load_trained(metrics, weights, device)
    if checksum(splits) != run["data_sha256"]:
        raise ArtifactError(
            f"{metrics}: the data rebuilt for evaluation differ from those the model was trained "
            f"on (CIFAR-10 files or torch changed?). Retrain with: "
            f"snakemake --cores all --force {weights}"
        )
    on_device = {k: (x.to(device), y.to(device)) for k, (x, y) in splits.items()}
    rows = evaluate_conditions(net, on_device, batch_size, studies.CONDITIONS[study])
    extra = {}
    if study == "cifar_nad":
        v = vectors[int(variant[1:])].reshape(SIDE, SIDE)
        u = torch.zeros(4, SIDE, SIDE)
        u[3] = v
        x_test = on_device["test"][0][:n_points]
        extra = {
            f"v_vs_cifar_{k}": val
            for k, val in geo.direction_vs_channels(net, x_test, u.to(device), [0, 1, 2]).items()
        }
    rows = _unless_diverged(rows, run)
    if run["diverged"]:
        extra = {k: float("nan") for k in extra}
    key = {"study": study, "arch": arch, "variant": variant, "seed": seed}
    settings = {
        **studies.variant_columns(study, variant),
        **{f"data_{k}": v for k, v in data.items()},
        "n_train": len(splits["train"][0]),
        "n_test": len(splits["test"][0]),
        **_run_columns(run),
        **extra,
    }
    df = pd.DataFrame([{**key, **r, **settings} for r in rows])
    atomic_write(output, partial(df.to_parquet, index=False))
    print(df[["split", "condition", "accuracy", "loss"]].to_string(index=False))
    test = df[df["split"] == "test"].set_index("condition")["accuracy"]
    accs = ", ".join(f"{c} {a:.3f}" for c, a in test.items())
    return f"evaluate {study} {arch} {variant} seed={seed}: test accuracy {accs}"
