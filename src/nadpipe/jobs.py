"""One function per kind of pipeline job, each taking its typed job (nadpipe.grid) whole; the
workflow scripts are thin calls into these. A job loads, computes and writes."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from functools import partial

import numpy as np
import pandas as pd
import torch

from . import models, row
from . import shards as nad_shards
from .backend import Backend, facts, on_cpu, setup
from .bases import read_nad_file
from .batching import cell_key, spec_key
from .data import checksum
from .evaluate import MEASURES, Context, accuracy_and_loss, evaluate_conditions
from .findings import DIVERGED, FIT, NOT_FIT, at_chance
from .grid import EvalJob, NadJob, NadShardJob, TrainJob
from .io import (
    ArtifactError,
    atomic_write,
    derive_seed,
    file_sha256,
    forget,
    keep,
    load_json,
    load_torch,
    rebuild_command,
    save_json,
    save_torch,
    snakemake_command,
)
from .log import say, warn
from .nads import NadError, compute_nads, nads_of, overlaps_line
from .paths import CHUNKS, KEPT, at
from .provenance import provenance
from .record import GROUPS as RECORD_GROUPS
from .record import Applied, TrainingRecord, Where
from .runner import slots
from .settings import plain, typed
from .studies import REGISTRY, split_protocol
from .train import (
    TrainingDiverged,
    applied,
    diverged_epoch,
    init_seed,
    stacks,
    train,
)
from .usage import used

# columns of the measures that describe the architecture or the setting, not the learned
# function: they stand when the model did not fit its training set
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
    job: NadJob | dict,
    artifact: str,
    npy: str,
    summary: str,
    backend: Backend | None = None,
    born: str | None = None,
    shards: list[str] | tuple = (),
    rounds: list[dict] | None = None,
) -> str:
    """Compute (or read from job.file) one architecture's NADs; write the artifact (vectors,
    eigenvalues, diagnostics), the NADs alone as .npy (rows = NADs) and a readable summary.
    `backend`: the device and switches (default: those the Snakefile set, nadpipe.backend);
    `born`: where the networks are drawn (nads.sample_sensitivities; "cpu": a GPU computes the
    CPU's networks, which the GPU checks compare). `shards`: the networks' sensitivities
    computed ahead (nad_shard_job), put together here; `rounds`: the verdicts of the rounds
    until converged (nad_round_job), recorded with the NADs."""

    job = typed(NadJob, job) if isinstance(job, dict) else job
    device = setup(backend)
    start = time.perf_counter()
    # a merge keeps its outputs for a later merge's failure to put back (runs.restore_kept).
    # Only a merge: any change of its settings makes newer shards, so NADs put back look stale
    # to Snakemake; a job without inputs has nothing that would say so, so it forgets them
    root = _root(artifact, 2)
    if not shards:
        forget([artifact, npy, summary], at(KEPT, root), root)
    per_network = None  # what a network took here: computed, not read or put together
    if job.file:
        art, networks = _nads_from_file(job), None
    elif shards:
        art, networks = _nads_from_shards(job, shards)
    else:
        art, networks, per_network = _nads_computed(job, device, born, root)
    art.update(_nad_record(job), arch=job.arch, provenance=provenance(), networks=networks)
    if rounds:
        art["rounds"] = rounds
        if not rounds[-1]["converged"]:  # the ceiling reached: no round comes after it
            warn(
                f"NADs of {job.arch} did not converge by nads.n_networks ({networks} networks: "
                f"split-half top-10 overlap {rounds[-1]['overlap_top10']:.3f} < "
                f"{rounds[-1]['min_overlap_top10']}); they are made from these networks. Raise "
                "nads.n_networks (or lower min_overlap_top10) for a round more"
            )
    save_torch(art, artifact)
    atomic_write(npy, lambda tmp: np.save(open(tmp, "wb"), art["vectors"].numpy()))
    seconds = time.perf_counter() - start
    save_json({**_nad_summary(job, art), "seconds_per_network": per_network}, summary)
    if shards:  # what a later merge's failure puts back (see the start of this job)
        keep([artifact, npy, summary], at(KEPT, root), root)
    line = f"NADs of {job.arch}: {len(art['vectors'])} of d = {job.model.shape.d} in {seconds:.1f}s"
    sh = art["split_half"]
    if sh is not None:
        line += f"; split-half overlaps {overlaps_line(sh)}"
        # in the log, not among the run's warnings: the verdict (the NAD figure's job) says
        # what they mean, at k = 10, with what to do
        for k, why in sh["undefined"].items():
            say(f"NADs of {job.arch}: split-half overlap at k = {k} undefined: {why}")
    say(line)
    return line


def _nads_from_file(job: NadJob) -> dict:
    """The NADs of architectures.NAME.nads_file, checked to be the file the run planned."""
    shape = job.model.shape
    key = f"architectures.{job.arch}.nads_file"
    if file_sha256(job.file) != job.file_sha256:
        raise ArtifactError(
            f"config key {key!r}: {job.file} changed after this run was planned; run "
            f"again to use the new file: {snakemake_command('--cores', 'all')}"
        )
    vectors = torch.from_numpy(read_nad_file(job.file, shape, key))
    say(f"NADs of {job.arch} read from {job.file}: {len(vectors)} NADs of d = {shape.d}")
    return {
        "vectors": vectors.float(),
        "eigenvalues": None,
        "shape": list(shape),
        "split_half": None,
        "settings": None,
        "device": "file",
    }


def _nads_from_shards(job: NadJob, shards: list[str] | tuple) -> tuple[dict, int]:
    """The NADs put together from the sensitivities of `shards` (nad_shard_job)."""
    g = nad_shards.gather(shards, job.model, job.settings)
    # until converged the job's n_networks is 0: the rounds decide, the shards say
    networks = len(g) // job.settings.n_points
    say(f"NADs of {job.model.describe()} from {len(shards)} shard(s) of {networks} networks")
    settings = replace(job.settings, n_networks=networks)
    return nads_of(g, settings, job.model.shape, "cpu", advice=None), networks


def _nads_computed(job: NadJob, device, born: str | None, root: str) -> tuple[dict, int, float]:
    """The NADs computed here, resuming from the chunks a killed job kept; with the seconds
    a network took, for the readable record's forecast (nadpipe.convergence), which the
    artifact leaves out: it is the same bytes on any run."""
    networks = job.settings.n_networks
    say(f"NADs of {job.model.describe()}: {job.settings} on {device}")
    kept = _chunks(root, job.arch, job, device)
    computing = time.perf_counter()
    build = partial(models.build, job.model)
    art = compute_nads(
        build, job.settings, job.model.shape, device, advice=None, born=born, kept=kept
    )
    shutil.rmtree(kept, ignore_errors=True)
    return art, networks, (time.perf_counter() - computing) / networks


def _nad_summary(job: NadJob, art: dict) -> dict:
    """The readable record of a NAD artifact `art` (results/nads/ARCH.json)."""
    sh = art["split_half"]
    return {
        "arch": job.arch,
        **_nad_record(job),
        "shape": list(job.model.shape),
        "nads": len(art["vectors"]),
        "top_eigenvalues": None if art["eigenvalues"] is None else art["eigenvalues"][:10].tolist(),
        "split_half": None
        if sh is None
        else {
            "overlap": {str(k): v for k, v in sh["overlap"].items()},
            "undefined": {str(k): v for k, v in sh["undefined"].items()},
            "eigenvalue_rel_diff_top10": sh["eigenvalue_rel_diff_top10"],
            "halves": sh["halves"],
            "curve": {str(k): v for k, v in sh.get("curve", {}).items()},
        },
        "isotropy": art.get("isotropy"),
        "networks": art.get("networks"),
        "rounds": art.get("rounds"),
        "provenance": art["provenance"],
    }


def _root(path: str, up: int) -> str:
    """The results folder of the file `path`, `up` folders above it ({root}/nads/ARCH.pt: 2)."""
    for _ in range(up):
        path = os.path.dirname(os.path.abspath(path))
    return path


def _chunks(root: str, name: str, what: dict, device: torch.device) -> str:
    """The folder that keeps the finished chunks of the NAD job `name` (nadpipe.paths.CHUNKS),
    named by what decides its sensitivities (the job's spec and the device type: a GPU draws
    other numbers). Those another spec left are removed: they can serve no rerun."""
    key = hashlib.sha256(f"{plain(what)} {device.type}".encode()).hexdigest()[:16]
    folder = os.path.join(at(CHUNKS, root), name)
    for old in glob.glob(os.path.join(glob.escape(folder), "*")):
        if os.path.basename(old) != key:
            shutil.rmtree(old, ignore_errors=True)
    return os.path.join(folder, key)


def nad_shard_job(
    job: NadShardJob | dict, pt: str, summary: str, backend: Backend | None = None
) -> str:
    """The sensitivities of one shard of an architecture's networks (nadpipe.shards): the
    shard (.pt) and what made it (.json, with its provenance)."""
    job = typed(NadShardJob, job) if isinstance(job, dict) else job
    device, nads = setup(backend), job.nads
    start = time.perf_counter()
    say(f"NADs of {nads.model.describe()}: networks {job.first} to {job.stop - 1} on {device}")
    shard = nad_shards.compute(
        partial(models.build, nads.model),
        nads.model,
        nads.settings,
        nads.model.shape,
        job.first,
        job.stop,
        device,
        kept=(kept := _chunks(_root(pt, 4), f"{nads.arch}-{job.first}-{job.stop}", job, device)),
    )
    if not torch.isfinite(shard["sensitivities"]).all():
        raise NadError(
            f"the input sensitivities of networks {job.first} to {job.stop - 1} of {nads.arch} "
            "are not finite: the model's output overflows or is NaN at x0 +- h e_k; NADs from "
            "them would be meaningless"
        )
    save_torch(shard, pt)
    shutil.rmtree(kept, ignore_errors=True)
    seconds = time.perf_counter() - start
    save_json(
        {
            "arch": nads.arch,
            "first": job.first,
            "stop": job.stop,
            "key": shard["key"],
            "seconds": seconds,
            "provenance": shard["provenance"],
        },
        summary,
    )
    line = f"NAD shard of {nads.arch}: networks {job.first} to {job.stop - 1} in {seconds:.1f}s"
    say(line)
    return line


def nad_round_job(job: NadJob | dict, shards: list[str], min_overlap: float, out: str) -> str:
    """Whether the networks of `shards` give NADs that converged (nadpipe.shards.converged):
    the verdict of one round of NADs until converged."""
    job = typed(NadJob, job) if isinstance(job, dict) else job
    g = nad_shards.gather(shards, job.model, job.settings)
    verdict = nad_shards.converged(g, job.settings.n_points, min_overlap)
    save_json(verdict, out)
    line = f"NADs of {job.arch} from {verdict['networks']} networks: {verdict['said']}"
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


@dataclass(frozen=True)
class Member:
    """One model to train: seed `index` of the cell `job`."""

    job: TrainJob
    index: int = 0

    @property
    def name(self) -> str:
        return f"{self.job.arch} {self.job.variant} s{self.job.seeds[self.index]}"


def inputs_sha256(paths: list[str]) -> str:
    """The contents of the files a training read (NADs, CIFAR-10), as one digest: what a result
    trained ahead must have been trained on to be claimed."""
    text = ",".join(file_sha256(p) for p in sorted(paths))
    return hashlib.sha256(text.encode()).hexdigest()


def train_job(
    job: TrainJob | dict,
    nads_path: str | None,
    model_outs: list[str],
    record_outs: list[str],
    backend: Backend | None = None,
    slot: int = 0,
    ahead: str | None = None,
    inputs: list[str] | None = None,
) -> str:
    """Train the model(s) of one cell, one per seed (several seeds: one batched ensemble); save
    each model's weights and its record (settings, per-epoch history, data checksum, where and
    with which library it ran).

    `ahead` (a one-seed cell of the workflow, nadpipe.batching): the cell's ahead file. Holding a
    result its batch's job trained for this spec on these `inputs`, the job claims it (it was
    given no GPU); empty, the cell trains here. `slot` > 0 (a GPU job): a GPU slot
    (nadpipe.runner.slots) is held while it trains."""
    job = typed(TrainJob, job) if isinstance(job, dict) else job
    backend = backend or Backend.from_env()
    name = f"{job.study} {job.arch} {job.variant} seeds={list(job.seeds)}"
    if ahead and os.path.getsize(ahead) > 0:
        record, why = _claim(job, ahead, inputs or [], model_outs[0], record_outs[0])
        if record is not None:
            return (
                f"train {name}: {record.outcome_line()} (trained on {record.device} with "
                f"{record.trained_together - 1} other cell(s) by its batch's job; claimed)"
            )
        warn(f"{ahead}: {why}; training this cell alone (it was given no GPU slot)")
    else:
        why = None
    hold = slots.gpu_slot if slot else contextlib.nullcontext
    with hold():
        device = setup(backend)
        members = [Member(job, k) for k in range(len(job.seeds))]
        results = _train(members, nads_path, device, backend, f"{model_outs[0]}.ckpt")
    for (state, record), model, path in zip(results, model_outs, record_outs, strict=True):
        save_torch(state, model)
        save_json(record.to_json(), path)
    ends = "; ".join(r.outcome_line() for _, r in results)
    unclaimed = f"; not its batch's result, {why}" if why else ""
    return f"train {name}: {ends} (on {device}{unclaimed})"


def _claim(
    job: TrainJob, ahead: str, inputs: list[str], model: str, record: str
) -> tuple[TrainingRecord | None, str | None]:
    """Move the result trained ahead in `ahead` to the cell's outputs: (its record, None), or
    (None, why it cannot be claimed: trained for another spec or library source, or on other
    inputs)."""

    found = load_torch(ahead)
    if found["record"].get("cell_key") != cell_key(job):  # raw: an older version's file too
        return None, "trained for another spec or library source than this cell's"
    if found["inputs_sha256"] != inputs_sha256(inputs):
        return None, "trained on other NADs or CIFAR-10 files than this cell reads now"
    trained = TrainingRecord.from_json(found["record"])
    if trained.diverged and job.train.fail_on_divergence:
        raise TrainingDiverged(
            f"{job.arch} {job.variant} s{job.seeds[0]}: training diverged in epoch "
            f"{trained.diverged_epoch} in its batch (train.fail_on_divergence is set; the other "
            f"cells of the batch are unaffected)"
        )
    save_torch(found["state"], model)
    save_json(trained.to_json(), record)
    return trained, None


def train_together_job(
    jobs: list[TrainJob | dict],
    nads_path: str | None,
    aheads: list[str],
    checkpoint: str,
    backend: Backend | None = None,
    slot: int = 0,
    inputs: list[str] | None = None,
) -> str:
    """Train one-seed cells of one batch (nadpipe.batching) together and write each one's weights
    and record into its ahead file, for its own job to claim. A member that diverges is recorded
    as diverged in its own result (its job fails if train.fail_on_divergence is set), the
    others finish; a batch that runs out of device memory is trained in two halves, again and
    again down to cells alone."""
    jobs = [typed(TrainJob, j) if isinstance(j, dict) else j for j in jobs]
    backend = backend or Backend.from_env()
    digest = inputs_sha256(inputs or [])
    hold = slots.gpu_slot if slot else contextlib.nullcontext
    with hold():
        device = setup(backend)
        results = _train_halving([Member(j) for j in jobs], nads_path, device, backend, checkpoint)
    for (state, record), ahead in zip(results, aheads, strict=True):
        save_torch({"state": state, "record": record.to_json(), "inputs_sha256": digest}, ahead)
    diverged = sum(r.diverged for _, r in results)
    note = f", {diverged} diverged (recorded in their own results)" if diverged else ""
    return f"trained {len(jobs)} cells together on {device}{note}"


def _train_halving(members, nads_path, device, backend, checkpoint):
    """`_train` of `members`, in halves while the device runs out of memory."""
    try:
        # each member's divergence is its own: the batch records it, the member's job raises
        return _train(members, nads_path, device, backend, checkpoint, keep_going=True)
    except torch.OutOfMemoryError:
        if len(members) == 1:
            raise
        if device.type == "cuda":
            torch.cuda.empty_cache()
        half = len(members) // 2
        say(
            f"out of device memory training {len(members)} cells together: "
            f"training {half} and {len(members) - half} apart"
        )
        return [
            *_train_halving(members[:half], nads_path, device, backend, f"{checkpoint}.a"),
            *_train_halving(members[half:], nads_path, device, backend, f"{checkpoint}.b"),
        ]


def _train(
    members: list[Member],
    nads_path: str | None,
    device,
    backend: Backend,
    checkpoint: str,
    keep_going: bool = False,
) -> list[tuple[dict, TrainingRecord]]:
    """Train `members` (cells' seeds that share a model and a protocol) as one ensemble; say each
    one's final loss and accuracies; return each one's weights (on the CPU) and record.
    `keep_going`: a diverging member is recorded, whatever train.fail_on_divergence says."""
    first = members[0].job
    settings = replace(first.train, fail_on_divergence=False) if keep_going else first.train
    splits, _ = _build_data(
        first.study, [m.job.data[m.index] for m in members], nads_path, first.nads
    )
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
    start, cpu_before = time.perf_counter(), used()[0]
    ran = applied(first.train, device, len(nets) if stacks(nets, xs, first.train) else 1)
    histories = train(nets, xs, ys, settings, orders, checkpoint, fingerprint)
    # bf16 as the steps ran it (each epoch's row says), not as the settings asked it
    ran["bf16"] = any(row.get("autocast") == "bfloat16" for h in histories for row in h)
    seconds = (time.perf_counter() - start) / len(nets)  # each model's share
    cpu_after, peak = used()
    cpu = (cpu_after - cpu_before) / len(nets)
    out = []
    for m, net, history, split, digest in zip(members, nets, histories, splits, sums, strict=True):
        at = diverged_epoch(history)
        x_test, y_test = (t.to(device) for t in split["test"])
        test_acc = float("nan") if at else accuracy_and_loss(net, x_test, y_test)[0]
        record = TrainingRecord(
            study=m.job.study,
            arch=m.job.arch,
            variant=m.job.variant,
            seed=m.job.seeds[m.index],
            model=plain(m.job.model),
            train=plain(m.job.train),
            data=dict(m.job.data[m.index].settings),
            data_sha256=digest,
            history=history,
            test_accuracy=test_acc,
            spec_key=spec_key(m.job),
            cell_key=cell_key(m.job) if len(m.job.seeds) == 1 else None,
            trained_with_seeds=len(m.job.seeds),
            trained_together=len(members),
            provenance=provenance(),
            diverged=at is not None,
            diverged_epoch=at,
            **facts(device, backend),
            applied=Applied(**ran),
            train_seconds=seconds,
            train_cpu_seconds=cpu,
            train_peak_mib=peak,
            where=Where.here(),
        )
        out.append((net.state_dict(), record))  # to the CPU when written (io.save_torch)
        say(f"{m.name}: {record.outcome_line()}, {seconds:.1f} s/model")
    for leftover in glob.glob(glob.escape(checkpoint) + "*"):  # the results are complete
        os.remove(leftover)
    return out


# -- evaluation -------------------------------------------------------------------------------


def _load_model(job: EvalJob, weights: str, device) -> torch.nn.Module:
    net = models.build(job.model)
    net.load_state_dict(load_torch(weights))
    return net.to(device).eval()


def _savez(arrays: dict, tmp: str) -> None:
    with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
        np.savez_compressed(f, **arrays)


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
    trained = TrainingRecord.from_json(load_json(record))
    (splits,), vectors = _build_data(job.study, [job.data], nads_path, job.nads)
    if checksum(splits) != trained.data_sha256:
        raise ArtifactError(
            f"{record}: the data rebuilt for evaluation differ from those the model was trained "
            f"on (CIFAR-10 files, NADs or torch changed?). Retrain it and everything made from it "
            f"with: {rebuild_command(weights)}"
        )
    net = _load_model(job, weights, device)
    on_device = {k: (x.to(device), y.to(device)) for k, (x, y) in splits.items()}
    start, cpu_before = time.perf_counter(), used()[0]
    rows = evaluate_conditions(net, on_device, job.batch_size, dict(job.conditions))
    extra, arrays_out = measures_of(job, net, on_device, vectors)
    outcome, why = model_outcome(trained, rows, job, len(splits["train"][0]))
    if outcome == DIVERGED:  # NaN weights: accuracies, margins and counts would read as numbers
        rows = [{**r, "accuracy": float("nan"), "loss": float("nan")} for r in rows]
    if outcome != FIT:  # a reliance angle of 0 from a zero gradient is no finding
        extra = {k: v if k in NOT_MEASURES else float("nan") for k, v in extra.items()}
    variant = REGISTRY[job.study].variant.parse(split_protocol(job.variant)[0])
    cpu_after, peak = used()
    spent = {
        "eval_seconds": time.perf_counter() - start,
        "eval_cpu_seconds": cpu_after - cpu_before,
        "eval_peak_mib": peak,
    }
    df = _model_rows(job, variant, trained, rows, splits, extra, (outcome, why), spent)
    atomic_write(table, partial(df.to_parquet, index=False))
    keys = {f"key_{k}": v for k, v in variant.columns().items()}
    atomic_write(arrays, partial(_savez, {**arrays_out, **keys, "key_outcome": outcome}))
    test = df[df["split"] == "test"].set_index("condition")["accuracy"]
    accs = ", ".join(f"{c} {a:.3f}" for c, a in test.items())
    return f"evaluate {job.study} {job.arch} {job.variant} seed={job.seed}: test accuracy {accs}"


def measures_of(job: EvalJob, net, on_device: dict, vectors) -> tuple[dict, dict]:
    """The study's measures of a model: (columns, arrays)."""
    extra, arrays_out = {}, {}
    if not job.measures:
        return extra, arrays_out
    with on_cpu():  # data-side, like the data (moved by the measures that use them)
        directions = REGISTRY[job.study].directions(job.data, vectors)
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
    return extra, arrays_out


def _model_rows(
    job: EvalJob,
    variant,
    trained: TrainingRecord,
    rows: list,
    splits: dict,
    extra: dict,
    said: tuple,
    spent: dict,
) -> pd.DataFrame:
    """A model's rows of the summary (nadpipe.row): what the evaluation decides of each group,
    and the groups the training record declares (`TrainingRecord.columns`)."""
    outcome, why = said
    nads = job.nads
    data = dict(job.data.settings)
    values = {
        row.KEY.name: {"study": job.study, "arch": job.arch, "variant": job.variant,
                       "protocol": split_protocol(job.variant)[1] or None, "seed": job.seed},
        row.VARIANT.name: variant.columns(),
        row.SETTINGS.name: {
            "model": job.model.model,
            "n_train": len(splits["train"][0]),
            "n_test": len(splits["test"][0]),
            "nad_source": None if nads is None else nads.arch,
            "nad_file": None if nads is None else nads.file or None,
        },
        row.DATA.name: {k: v for k, v in data.items() if k not in ("n_train", "n_test")},
        row.TRAIN.name: trained.train,
        row.NADS.name: {}
        if nads is None
        else {f"nad_{k}": v for k, v in asdict(nads.settings).items()},
        row.OUTCOME.name: {"outcome": outcome, "outcome_reason": why or None},
        row.PROVENANCE.name: provenance(),
        row.MEASURES.name: extra,
        row.RUN.name: spent,
    }  # fmt: skip
    for group in RECORD_GROUPS:  # the record's own columns first
        values[group] = {**trained.columns(group), **values.get(group, {})}
    return pd.DataFrame(row.model_rows(rows, values))


def model_outcome(
    trained: TrainingRecord, rows: list[dict], job: EvalJob, n: int
) -> tuple[str, str]:
    """(FIT | NOT_FIT | DIVERGED, why; nadpipe.findings): a model whose training accuracy
    (every channel kept) is not above guessing cannot be read for its measures."""
    if trained.diverged:
        return DIVERGED, f"the training loss became {trained.final_train_loss}"
    full = job.conditions[0][0]  # the first condition keeps every channel
    acc = next(r["accuracy"] for r in rows if r["split"] == "train" and r["condition"] == full)
    if at_chance(acc, n, job.model.classes):
        return NOT_FIT, (
            f"training accuracy {acc:.3f}, not above guessing ({1 / job.model.classes:.3f} on "
            f"{n} samples): its measures (reliance, margins, Jacobian, transitions, bands) are NaN"
        )
    return FIT, ""


# -- for the warm job server ------------------------------------------------------------------

DYNAMO = ("torch._dynamo",)  # 1.5 s to import: an optimizer's first step imports it


def _dynamo_if_deterministic() -> tuple[str, ...]:
    """torch.use_deterministic_algorithms(True) (nadpipe.backend.setup) imports it too."""
    return DYNAMO if Backend.from_env().deterministic else ()


# what each job imports only as it runs, which the warm job server (nadpipe.runner.worker.warm)
# imports once, before it forks the first job of that function
train_job.warm = train_together_job.warm = DYNAMO
for _job in (nads_job, nad_shard_job, nad_round_job, evaluate_job):
    _job.warm = _dynamo_if_deterministic
