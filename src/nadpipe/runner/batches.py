"""Grid cells trained together. On a GPU one small model per job leaves the device idle, so the
cells of a study that share a model, a protocol and the shape of their data train as one vmapped
ensemble (models with batch norm, which vmap cannot stack, train alone).

Each cell stays its own Snakemake job: its own artifacts, log, staleness and rerun, its own
SLURM job. The batching happens when the jobs run:
- the main process writes, per batch key, the cells that share it (`write_manifests`);
- the first job of a key to start takes the key's lock and trains its own cell together with
  every sibling whose result is missing or stale (its record was made for another spec), up to
  gpus.batch_cells; each sibling's weights and record go to a cache (`CACHE`, one folder per
  cell, named by everything its result depends on);
- a sibling's own job, when Snakemake starts it, takes the lock, finds its result in the cache
  and moves it to its outputs. A job without a cached result (Snakemake reruns it for a reason
  the leader could not see, e.g. --forcerun) leads a batch of its own.
So a changed setting retrains the cells it touches, and only those; a killed batch resumes from
its checkpoint when its jobs run again; each member's divergence is its own. Each step is the
same arithmetic as training each cell alone, in another order: equal up to float rounding
(tests/test_batches.py), a difference that can grow over a training at the edge of learning
(docs/trust.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..log import say
from ..settings import plain

ROOT = ".nadpipe/batches"  # manifests and locks, per batch key
CACHE = ".nadpipe/trained"  # results trained ahead for their own jobs, per cell


@dataclass(frozen=True)
class Member:
    """One model to train: seed `index` of the cell `job`, and where its weights and record go."""

    job: object  # nadpipe.grid.TrainJob
    index: int
    model: str
    record: str

    @property
    def name(self) -> str:
        j = self.job
        return f"{j.arch} {j.variant} s{j.seeds[self.index]}"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:24]


def batch_key(job) -> str:
    """What cells that can train together share: everything but the variant and the seed."""
    data = [{k: v for k, v in plain(d).items() if k not in ("variant", "seed")} for d in job.data]
    return _digest([job.study, job.arch, plain(job.model), plain(job.train), plain(job.nads), data])


def cell_key(job) -> str:
    """Everything a cell's trained model depends on, the library source included."""
    from ..provenance import source_hash

    return _digest([plain(job), source_hash()])


def spec_key(job) -> str:
    """What Snakemake's params trigger sees of a cell: its train job as the rule's params."""
    return _digest(plain(job))


def needs_training(job, model: str, record: str) -> bool:
    """Whether this run will train the cell, as the main process sees it before any job: its
    outputs missing, or its record made for another spec (the rule's params changed)."""
    from ..io import load_json

    if not (os.path.exists(model) and os.path.exists(record)):
        return True
    try:
        return load_json(record).get("spec_key") != spec_key(job)
    except Exception:  # noqa: BLE001 -- unreadable: its job will say so; train it anew
        return True


@dataclass(frozen=True)
class Chunk:
    """Cells that train together when they train in the same run: the first (the leader)
    trains the stale ones; the others take its record as an `ancient` input (no rerun when it
    changes), so that their jobs run after it and claim their results."""

    key: str
    index: int
    leader: tuple[object, str, str]  # the leader's train job, model and record paths

    def leads(self, model: str) -> bool:
        return self.leader[1] == model

    def trains_ahead(self, job, model: str, record: str) -> bool:
        """Whether this run's leader will train the cell `job` for it: both need training.
        Such a cell's job only claims its result: it asks for no GPU."""
        return not self.leads(model) and (
            needs_training(job, model, record) and needs_training(*self.leader)
        )


def plan(
    entries: list[tuple[object, str, str]], size: int, stackable: Callable[[object], bool]
) -> dict[str, Chunk]:
    """Per model path, the chunk of its cell: per batch key, the cells whose model can be
    stacked, in the manifest's order, `size` at a time (cells alone in a chunk left out). Fixed
    by the config, not by what is stale, so that a cell's inputs do not change from run to run
    (Snakemake would rerun it)."""
    if size <= 1:
        return {}
    by_key: dict[str, list] = {}
    for job, model, record in entries:
        if stackable(job):
            by_key.setdefault(batch_key(job), []).append((job, model, record))
    out = {}
    for key, cells in by_key.items():
        for index, start in enumerate(range(0, len(cells), size)):
            chunk = cells[start : start + size]
            if len(chunk) > 1:
                for _, model, _ in chunk:
                    out[model] = Chunk(key, index, chunk[0])
    return out


def write_manifests(
    entries: list[tuple[object, str, str]], chunks: dict[str, Chunk] | None = None, root: str = ROOT
) -> None:
    """Per batch key, the cells (train job, model path, record path, planned chunk) that share
    it; written by the main process before any job runs."""
    from ..io import save_json

    by_key: dict[str, list] = {}
    for job, model, record in entries:
        chunk = (chunks or {}).get(model)
        by_key.setdefault(batch_key(job), []).append(
            {
                "job": plain(job),
                "model": model,
                "record": record,
                "chunk": None if chunk is None else chunk.index,
            }  # fmt: skip
        )
    for key, cells in by_key.items():
        save_json(cells, os.path.join(root, f"{key}.json"))


@contextlib.contextmanager
def _locked(key: str, root: str) -> Iterator[None]:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f"{key}.lock"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # waits while another job of this batch trains it
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cached(job, cache: str) -> tuple[str, str]:
    folder = os.path.join(cache, cell_key(job))
    return os.path.join(folder, "model.pt"), os.path.join(folder, "record.json")


def trained_ahead(job, cache: str = CACHE) -> bool:
    """Whether the cell `job`'s result waits in the cache, trained by its chunk's leader."""
    return os.path.exists(_cached(job, cache)[1])


def _stale(cell: dict, job) -> bool:
    """Whether a sibling's result on disk is missing or was made for another spec."""
    from ..io import load_json

    if not (os.path.exists(cell["model"]) and os.path.exists(cell["record"])):
        return True
    try:
        return load_json(cell["record"]).get("cell_key") != cell_key(job)
    except Exception:  # noqa: BLE001 -- unreadable: its job will say so; train it anew
        return True


def train_cell(
    job,
    model: str,
    record: str,
    size: int,
    train: Callable[[list[Member], str], None],
    root: str = ROOT,
    cache: str = CACHE,
) -> str:
    """Bring the cell `job` (one seed) to its outputs: its result trained ahead by its chunk's
    leader, else trained now by `train(members, checkpoint)` with the stale siblings of its
    planned chunk (at most `size` cells; see `plan`), or alone. Returns what happened, in a
    line."""
    from ..grid import TrainJob
    from ..settings import typed

    key = batch_key(job)
    path = os.path.join(root, f"{key}.json")
    cells = json.load(open(path)) if os.path.exists(path) else []
    mine = next((c for c in cells if typed(TrainJob, c["job"]) == job), None)
    chunk = None if mine is None or size <= 1 else mine.get("chunk")
    # one lock per planned chunk: chunks of a key train at once on several GPUs
    with _locked(f"{key}-{chunk if chunk is not None else cell_key(job)}", root):
        own = _cached(job, cache)
        if os.path.exists(own[1]):
            os.replace(own[0], model)
            os.replace(own[1], record)
            os.rmdir(os.path.dirname(own[0]))
            return f"trained ahead in a batch by a sibling's job; moved to {model}"
        members = [Member(job, 0, model, record)]
        for cell in cells if chunk is not None else []:
            other = typed(TrainJob, cell["job"])
            if cell.get("chunk") != chunk or other == job or len(members) >= size:
                continue
            if not os.path.exists(_cached(other, cache)[1]) and _stale(cell, other):
                members.append(Member(other, 0, *_cached(other, cache)))
        if len(members) == 1:
            train(members, f"{model}.ckpt")  # not a declared output: kept after a kill
            return "trained alone"
        names = ", ".join(m.name for m in members)
        say(f"training {len(members)} cell(s) together (batch {key}, chunk {chunk}): {names}")
        checkpoint = os.path.join(root, f"{key}-{_digest([m.name for m in members])}.ckpt")
        train(members, checkpoint)
        return f"trained with {len(members) - 1} sibling cell(s) in one batch"
