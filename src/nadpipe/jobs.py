"""One function per kind of pipeline job, each taking its typed job (nadpipe.grid) whole; the
workflow scripts are thin calls into these. A job loads, computes and writes."""

from __future__ import annotations

import contextlib
import glob
import os
import time
from dataclasses import asdict
from functools import partial

import numpy as np
import pandas as pd
import torch

from . import models, row
from .backend import Backend, facts, on_cpu, setup
from .data import checksum
from .evaluate import MEASURES, Context, accuracy_and_loss, evaluate_conditions
from .findings import at_chance
from .grid import EvalJob, NadJob, TrainJob
from .io import (
    ArtifactError,
    atomic_write,
    derive_seed,
    file_sha256,
    load_json,
    load_parquet,
    load_torch,
    rebuild_command,
    run_facts,
    save_json,
    save_torch,
    snakemake_command,
)
from .log import say, warn
from .nads import compute_nads, overlaps_line
from .provenance import provenance
from .runner import batches, slots
from .runner.batches import Member
from .settings import plain, typed
from .studies import REGISTRY, split_protocol
from .train import (
    applied,
    diverged_epoch,
    init_seed,
    stackable,
    stacks,
    train,
)

# columns of the measures that describe the architecture or the setting, not the learned
# function: they stand when the model did not learn
NOT_MEASURES = {"relu_units", "margin_max"}


# -- NADs -------------------------------------------------------------------------------------


def _nad_record(job: NadJob) -> dict:
    """What a NAD artifact must have been made from (checked by every job that reads it)."""
    return {
        "model": plain(job.model),
        "settings": plain(job.settings),
        "file": job.file,
        "file_sha256": job.file_sha256,
    }


def nads_job(
    job: NadJob | dict, artifact: str, npy: str, summary: str, backend: Backend | None = None
) -> str:
    """Compute (or read from job.file) one architecture's NADs; write the artifact (vectors,
    eigenvalues, diagnostics), the NADs alone as .npy (rows = NADs) and a readable summary.
    `backend`: the device and switches (default: those the Snakefile set, nadpipe.backend)."""
    from .bases import read_nad_file

    job = typed(NadJob, job) if isinstance(job, dict) else job
    device = setup(backend)
    start = time.perf_counter()
    shape = job.model.shape
    if job.file:
        key = f"architectures.{job.arch}.nads_file"
        if file_sha256(job.file) != job.file_sha256:
            raise ArtifactError(
                f"config key {key!r}: {job.file} changed after this run was planned; run "
                f"again to use the new file: {snakemake_command('--cores', 'all')}"
            )
        vectors = torch.from_numpy(read_nad_file(job.file, shape, key))
        art = {
            "vectors": vectors.float(),
            "eigenvalues": None,
            "shape": list(shape),
            "split_half": None,
            "settings": None,
            "device": "file",
        }
        say(f"NADs of {job.arch} read from {job.file}: {len(vectors)} NADs of d = {shape.d}")
    else:
        say(f"NADs of {job.model.describe()}: {job.settings} on {device}")
        art = compute_nads(
            partial(models.build, job.model), job.settings, shape, device, advice=None
        )
    art.update(_nad_record(job), arch=job.arch, provenance=provenance())
    save_torch(art, artifact)
    atomic_write(npy, lambda tmp: np.save(open(tmp, "wb"), art["vectors"].numpy()))
    seconds = time.perf_counter() - start
    sh = art["split_half"]
    save_json(
        {
            "arch": job.arch,
            **_nad_record(job),
            "shape": list(shape),
            "nads": len(art["vectors"]),
            "top_eigenvalues": None
            if art["eigenvalues"] is None
            else art["eigenvalues"][:10].tolist(),
            "split_half": None
            if sh is None
            else {
                "overlap": {str(k): v for k, v in sh["overlap"].items()},
                "undefined": {str(k): v for k, v in sh["undefined"].items()},
                "eigenvalue_rel_diff_top10": sh["eigenvalue_rel_diff_top10"],
                "halves": sh["halves"],
            },
            "isotropy": art.get("isotropy"),
            "provenance": provenance(),
        },
        summary,
    )
    line = f"NADs of {job.arch}: {len(art['vectors'])} of d = {shape.d} in {seconds:.1f}s"
    if sh is not None:
        line += f"; split-half overlaps {overlaps_line(sh)}"
        for k, why in sh["undefined"].items():
            warn(f"NADs of {job.arch}: split-half overlap at k = {k} undefined: {why}")
    say(line)
    return line


def load_nads(path: str, job: NadJob) -> torch.Tensor:
    """The NAD vectors (k, d) of the artifact at `path`, after checking that it was made for
    `job` (the same model, settings or file): an artifact made for other settings (possible with
    --rerun-triggers mtime, or a file copied in) stops the job."""
    art = load_torch(path)
    expected = _nad_record(job)
    found = {k: art.get(k) for k in expected}
    if found != expected:
        differ = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
        raise ArtifactError(
            f"{path} was computed with other settings than the config asks for "
            f"(found, expected): {differ}. Rebuild it with: {rebuild_command(path)}"
        )
    return art["vectors"]


# -- training ---------------------------------------------------------------------------------


def _build_data(study: str, specs, nads_path: str | None, nads: NadJob | None):
    """Each spec's train and test tensors, on the CPU (nadpipe.backend: born there by design)."""
    vectors = load_nads(nads_path, nads) if nads is not None else None
    entry = REGISTRY[study]
    with on_cpu():
        return [entry.build(spec, vectors) for spec in specs], vectors


def train_job(
    job: TrainJob | dict,
    nads_path: str | None,
    model_outs: list[str],
    record_outs: list[str],
    backend: Backend | None = None,
    slot: int = 0,
) -> str:
    """Train the model(s) of one cell, one per seed (several seeds: one batched ensemble); save
    each model's weights and its record (settings, per-epoch history, data checksum, where and
    with which library it ran). With batching on (gpus.batch_cells, nadpipe.runner.batches), a
    one-seed cell of a stackable model trains together with its stale sibling cells.

    `slot` > 0 (a GPU job of the workflow): a GPU slot (nadpipe.runner.slots) is taken only to
    train, so a cell whose batch a sibling's job is training waits for it holding no GPU."""
    job = typed(TrainJob, job) if isinstance(job, dict) else job
    backend = backend or Backend.from_env()
    hold = slots.gpu_slot if slot else contextlib.nullcontext
    name = f"{job.study} {job.arch} {job.variant} seeds={list(job.seeds)}"
    # decided before CUDA starts (a slot sets CUDA_VISIBLE_DEVICES): a job that will find a GPU
    size = backend.batch_size(backend.device != "cpu" and slots.gpu_expected())
    where = []

    def run(members: list[Member], checkpoint: str) -> None:
        with hold():
            device = setup(backend)
            where.append(device)
            _train(members, nads_path, device, backend, checkpoint)

    # a cell whose result a leader trained ahead (whatever this job's device), or that may lead
    if len(job.seeds) == 1 and (batches.trained_ahead(job) or size > 1 and stackable(job)):
        how = batches.train_cell(job, model_outs[0], record_outs[0], size, run)
    else:
        outs = zip(model_outs, record_outs, strict=True)
        run([Member(job, k, m, r) for k, (m, r) in enumerate(outs)], f"{model_outs[0]}.ckpt")
        how = "trained alone"
    if how == "trained alone":
        how = f"on {where[0]}"  # as a cell trained alone always said
    ends = "; ".join(_outcome_line(load_json(r)) for r in record_outs)
    return f"train {name}: {ends} ({how})"


def _outcome_line(record: dict) -> str:
    end = record["history"][-1]
    line = (
        f"train loss {end['loss']:.4f}, train accuracy {end['train_accuracy']:.3f}, "
        f"test accuracy {record['test_accuracy']:.3f}"
    )
    return line + (f", DIVERGED in epoch {record['diverged_epoch']}" if record["diverged"] else "")


def _train(
    members: list[Member], nads_path: str | None, device, backend: Backend, checkpoint: str
) -> None:
    """Train `members` (cells' seeds that share a model and a protocol) as one ensemble; write
    each one's weights and record, and say each one's final loss and accuracies."""
    first = members[0].job
    splits, _ = _build_data(first.study, [m.job.data[m.index] for m in members], nads_path,
                            first.nads)  # fmt: skip
    sums = [checksum(s) for s in splits]
    xs = torch.stack([s["train"][0] for s in splits]).to(device)  # (members, n, C, H, W)
    ys = torch.stack([s["train"][1] for s in splits]).to(device)
    nets, orders = [], []
    for m in members:
        seed = m.job.seeds[m.index]
        init_seed(seed, *m.job.stream)
        nets.append(models.build(m.job.model).to(device))
        orders.append(derive_seed("order", seed, *m.job.stream))
    fingerprint = {
        "data": sums,
        "model": plain(first.model),
        "train": plain(first.train),
        "seeds": {
            "init": [derive_seed("init", m.job.seeds[m.index], *m.job.stream) for m in members],
            "order": orders,
        },
        "provenance": provenance(),
    }
    say(f"train {len(members)} model(s) on {device}: {len(xs[0])} samples, {first.train}")
    start = time.perf_counter()
    ran = applied(first.train, device, len(nets) if stacks(nets, xs, first.train) else 1)
    histories = train(nets, xs, ys, first.train, orders, checkpoint, fingerprint)
    seconds = (time.perf_counter() - start) / len(nets)  # each model's share
    for m, net, history, split, digest in zip(members, nets, histories, splits, sums, strict=True):
        at = diverged_epoch(history)
        x_test, y_test = (t.to(device) for t in split["test"])
        test_acc = float("nan") if at else accuracy_and_loss(net, x_test, y_test)[0]
        save_torch(net.state_dict(), m.model)
        save_json(
            {
                "study": m.job.study,
                "arch": m.job.arch,
                "variant": m.job.variant,
                "seed": m.job.seeds[m.index],
                "model": plain(m.job.model),
                "train": plain(m.job.train),
                "applied": ran,  # of bf16, channels_last, compile: what took effect
                "data": dict(m.job.data[m.index].settings),
                "data_sha256": digest,
                "history": history,
                "test_accuracy": test_acc,
                "diverged": at is not None,
                "diverged_epoch": at,
                "trained_with_seeds": len(m.job.seeds),
                "trained_together": len(members),
                "cell_key": batches.cell_key(m.job) if len(m.job.seeds) == 1 else None,
                "spec_key": batches.spec_key(m.job),
                "train_seconds": seconds,
                **facts(device, backend),
                **run_facts(),
                "provenance": provenance(),
            },
            m.record,
        )
        say(f"{m.name}: {_outcome_line(load_json(m.record))}, {seconds:.1f} s/model")
    for leftover in glob.glob(glob.escape(checkpoint) + "*"):  # the outputs are complete
        os.remove(leftover)


# -- evaluation -------------------------------------------------------------------------------


def _load_model(job: EvalJob, weights: str, device) -> torch.nn.Module:
    net = models.build(job.model)
    net.load_state_dict(load_torch(weights))
    return net.to(device).eval()


def evaluate_job(
    job: EvalJob | dict,
    nads_path: str | None,
    weights: str,
    record: str,
    table: str,
    arrays: str,
    backend: Backend | None = None,
) -> str:
    """Evaluate one trained model under its study's conditions and measures: one parquet row
    per (split, condition) carrying the model's full key, its settings and provenance, and the
    measures' arrays (cross-sections) as .npz."""
    job = typed(EvalJob, job) if isinstance(job, dict) else job
    device = setup(backend)
    run = load_json(record)
    (splits,), vectors = _build_data(job.study, [job.data], nads_path, job.nads)
    if checksum(splits) != run["data_sha256"]:
        raise ArtifactError(
            f"{record}: the data rebuilt for evaluation differ from those the model was trained "
            f"on (CIFAR-10 files, NADs or torch changed?). Retrain it and everything made from it "
            f"with: {rebuild_command(weights)}"
        )
    net = _load_model(job, weights, device)
    on_device = {k: (x.to(device), y.to(device)) for k, (x, y) in splits.items()}
    start = time.perf_counter()
    rows = evaluate_conditions(net, on_device, job.batch_size, dict(job.conditions))
    entry = REGISTRY[job.study]
    extra, arrays_out = {}, {}
    if job.measures:
        with on_cpu():  # data-side, like the data (moved by the measures that use them)
            directions = entry.directions(job.data, vectors)
        ctx = Context(
            on_device,
            directions,
            vectors,
            tuple(job.data.shape),
            job.analysis,
            (*job.stream, job.seed),
        )
        for name in job.measures:
            columns, found = MEASURES[name](net, ctx)
            extra.update(columns)
            arrays_out.update(found)
    outcome, why = model_outcome(run, rows, job, len(splits["train"][0]))
    if outcome == "diverged":  # NaN weights: accuracies, margins and counts would read as numbers
        rows = [{**r, "accuracy": float("nan"), "loss": float("nan")} for r in rows]
    if outcome != "learned":  # a reliance angle of 0 from a zero gradient is no finding
        extra = {k: v if k in NOT_MEASURES else float("nan") for k, v in extra.items()}
    inner, protocol = split_protocol(job.variant)
    variant = entry.variant.parse(inner)
    data = dict(job.data.settings)
    nads = job.nads
    df = pd.DataFrame(
        row.model_rows(
            key={"study": job.study, "arch": job.arch, "variant": job.variant,
                 "protocol": protocol or None, "seed": job.seed},
            variant=variant.columns(),
            rows=rows,
            settings={
                "model": job.model.model,
                "n_train": len(splits["train"][0]),
                "n_test": len(splits["test"][0]),
                "nad_source": None if nads is None else nads.arch,
                "nad_file": None if nads is None else nads.file or None,
            },
            data={k: v for k, v in data.items() if k not in ("n_train", "n_test")},
            train=run["train"],
            nads={} if nads is None else {f"nad_{k}": v for k, v in asdict(nads.settings).items()},
            outcome={
                "final_train_loss": run["history"][-1]["loss"],
                "diverged": run["diverged"],
                "diverged_epoch": run["diverged_epoch"],  # None: did not diverge
                "outcome": outcome,
                "outcome_reason": why or None,
            },
            facts={
                "device": run["device"],
                "deterministic": run.get("deterministic", False),
                "tf32": run.get("tf32", False),
                **run.get("applied", {}),  # bf16, channels_last, compile as they ran
            },
            provenance=provenance(),
            measures=extra,
            run={
                "train_seconds": run["train_seconds"],
                "eval_seconds": time.perf_counter() - start,
                **{k: run.get(k) or None for k in run_facts()},  # as the training recorded
            },
        )
    )  # fmt: skip

    atomic_write(table, partial(df.to_parquet, index=False))

    def write_arrays(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez_compressed(
                f,
                **arrays_out,
                **{f"key_{k}": v for k, v in variant.columns().items()},
                key_outcome=outcome,
            )

    atomic_write(arrays, write_arrays)
    test = df[df["split"] == "test"].set_index("condition")["accuracy"]
    accs = ", ".join(f"{c} {a:.3f}" for c, a in test.items())
    return f"evaluate {job.study} {job.arch} {job.variant} seed={job.seed}: test accuracy {accs}"


def model_outcome(run: dict, rows: list[dict], job: EvalJob, n: int) -> tuple[str, str]:
    """("learned" | "did not learn" | "diverged", why): a model whose training accuracy (every
    channel kept) is not above guessing cannot be read for its measures."""
    if run["diverged"]:
        return "diverged", f"the training loss became {run['history'][-1]['loss']}"
    full = job.conditions[0][0]  # the first condition keeps every channel
    acc = next(r["accuracy"] for r in rows if r["split"] == "train" and r["condition"] == full)
    if at_chance(acc, n, job.model.classes):
        return "did not learn", (
            f"training accuracy {acc:.3f}, not above guessing ({1 / job.model.classes:.3f} on "
            f"{n} samples): its measures (reliance, margins, Jacobian, transitions, bands) are NaN"
        )
    return "learned", ""


def _with_references(df: pd.DataFrame, references: dict, axis: list[int] | None) -> pd.DataFrame:
    from . import references as refs

    study = df["study"].iloc[0]
    keys = refs.keys(study)
    published, stats = [], []
    for arch, raw in sorted(references.items()):
        ref = refs.read(refs.reference_of(raw), study, f"{study}.references.{arch}", axis)
        # a fraction, as `accuracy` beside it (published tables are in percent)
        published.append((ref / 100).rename("reference_accuracy").reset_index().assign(arch=arch))
        for protocol, mine in refs.ours(df[df["arch"] == arch], study).items():
            a = refs.agreement(mine, ref)
            stats.append({"arch": arch, "protocol": protocol or None,
                          **{f"reference_{k}": v for k, v in a.items()}})  # fmt: skip
            say(f"{arch} against {raw['file']}: {refs.line(protocol, a)}")
    df = df.merge(pd.concat(published), on=["arch", *keys], how="left")
    return df.merge(pd.DataFrame(stats), on=["arch", "protocol"], how="left")


# -- tables -----------------------------------------------------------------------------------


def aggregate_job(
    evaluations: list[str],
    summary: str,
    runs: str,
    references: dict | None = None,
    axis: list[int] | None = None,
) -> str:
    """Concatenate the rows of every model of a study, sorted by their key; each model's
    timings and where it ran go to `runs`, one row per model. With `references` (architecture
    -> a published table, nadpipe.references; `axis`: the study's frequencies, for a map),
    each row carries its cell's published accuracy and its protocol's agreement with it."""
    df = pd.concat([load_parquet(p) for p in evaluations], ignore_index=True)
    if references:
        df = _with_references(df, references, axis)
    key = ["study", "arch", "variant", "seed"]
    variant = list(REGISTRY[df["study"].iloc[0]].variant.COLUMNS)  # the variant's key columns
    df = df.sort_values(row.sort_columns(variant), kind="stable")
    timing = [c for c in row.names(row.RUN) if c in df]
    per_model = df[key + timing].drop_duplicates(key).reset_index(drop=True)
    df = df.drop(columns=timing).reset_index(drop=True)
    atomic_write(summary, partial(df.to_parquet, index=False))
    atomic_write(runs, partial(per_model.to_parquet, index=False))
    if df["diverged"].any():
        n = int(df.drop_duplicates(key)["diverged"].sum())
        warn(f"{n} training(s) of {df['study'].iloc[0]} diverged: their rows are NaN ({summary})")
    dead = df.drop_duplicates(key)
    dead = dead[dead["outcome"] == "did not learn"] if "outcome" in dead else dead.iloc[:0]
    if len(dead):
        cells = ", ".join(f"{a} {v} s{s}" for a, v, s in dead[["arch", "variant", "seed"]].values)
        warn(
            f"{len(dead)} model(s) of {df['study'].iloc[0]} did not learn (training accuracy "
            f"not above guessing): {cells}; their accuracies stand, their other measures are NaN "
            f"and their cells are marked 'did not learn' in the figures ({summary})"
        )
    return f"{len(df)} rows from {len(evaluations)} models -> {summary}; timings -> {runs}"
