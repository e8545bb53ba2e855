"""Cells trained together, decided by the plan. On a GPU one small model per job leaves the
device idle, so the stale cells of a study that share a model, a protocol and the shape of
their data train as one vmapped ensemble (models with batch norm, which vmap cannot stack,
train alone).

Every one-seed cell is its own Snakemake job (rule `train`) whose inputs and params are the
cell's alone: its NADs or CIFAR files, its own spec, and one more input, its *ahead* file
(`paths.AHEAD`, temporary), whose path never changes. Who writes that file is what batching
decides, run by run:
- a cell this run trains in a batch: the batch's job (`train_together_N`, one GPU job), which
  trains the batch's cells and writes each one's weights and record into its ahead file; the
  cell's own job then asks for no GPU and only claims that result, after checking that it was
  trained for this spec on these data;
- any other cell: `trains_alone`, a local rule that writes an empty ahead file; the cell's job
  trains it alone.
Both rules run one script with no params (workflow/scripts/ahead.py): Snakemake keeps the
provenance of a temporary file after removing it and reruns its maker when that provenance
changes, so an ahead file must look the same whichever rule made it.
So batching never changes a cell's inputs or params: `gpus.batch_cells`, the device, the
executor, the grid's order or the other cells never rerun a cell, and a batch holds only cells
this run trains anyway (`stale`: what Snakemake will rerun, as far as the plan can see before the
run; a cell it cannot foresee trains alone, one it foresees wrongly is trained and discarded).
Torch-free but for `stackable`'s probe of a model not probed before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import verdicts
from .provenance import source_hash
from .settings import per_model, plain


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:24]


def batch_key(job) -> str:
    """What cells that can train together share: everything but the variant and the seed."""
    data = [{k: v for k, v in plain(d).items() if k not in ("variant", "seed")} for d in job.data]
    return _digest([job.study, job.arch, plain(job.model), plain(job.train), plain(job.nads), data])


def spec_key(job) -> str:
    """What Snakemake's params trigger sees of a cell: its train job as the rule's params."""
    return _digest(plain(job))


def cell_key(job) -> str:
    """Everything a cell's trained model depends on, the library source included: what a
    result trained ahead must carry to be claimed by the cell's job."""

    return _digest([plain(job), source_hash()])


@dataclass(frozen=True)
class Cell:
    """A one-seed training the plan may batch: its job (grid.TrainJob), its weights, record and
    ahead paths, and the files it reads (its NAD artifact, its CIFAR-10 files)."""

    job: object
    model: str
    record: str
    ahead: str
    nads: tuple[str, ...] = ()
    cifar: tuple[str, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        return (*self.nads, *self.cifar)


@dataclass(frozen=True)
class Batch:
    """Cells trained together by one job: its rule's name, the cells' jobs and ahead files (the
    rule's params and outputs), the files they read (its inputs), and its checkpoint, named by
    its cells (a killed batch resumes when the same cells are stale again)."""

    name: str
    jobs: tuple[dict, ...]  # plain train jobs
    aheads: tuple[str, ...]
    nads: tuple[str, ...]
    cifar: tuple[str, ...]
    checkpoint: str

    def plain(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def of(cls, d: dict) -> Batch:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def stale(cell: Cell, forced: bool = False) -> bool:
    """Whether Snakemake will rerun the cell's training, as the plan sees it before the run:
    forced (--forcerun of training or of what it reads, -F), its outputs missing or unreadable,
    its record made for another spec (the params trigger), or an input missing or newer than
    its weights (the mtime trigger; a missing one is remade this run)."""
    if forced or not (os.path.exists(cell.model) and os.path.exists(cell.record)):
        return True
    try:
        with open(cell.record) as f:
            if json.load(f).get("spec_key") != spec_key(cell.job):
                return True
    except (OSError, ValueError):  # unreadable: its job will say so; train it anew
        return True
    made = os.path.getmtime(cell.model)
    return any(not os.path.exists(p) or os.path.getmtime(p) > made for p in cell.inputs)


def stackable(job) -> bool:
    """Whether a train job's (grid.TrainJob) model can train in a batch of cells: neither
    channels-last nor compile asked for, and copies of the model stack in a vmap
    (nadpipe.train.model_stacks, which imports torch; remembered for a registry model by
    nadpipe.verdicts, so that planning a run of models probed before imports none)."""
    if per_model(job.train):
        return False
    stacks = verdicts.stacks(job.model)
    if stacks is None:
        # deferred: it loads torch, which importing batching does not
        from .train import model_stacks

        stacks = model_stacks(job.model)
        verdicts.note_stacks(job.model, stacks)
    return stacks


def plan(
    cells: Iterable[Cell],
    size: int,
    stackable: Callable[[object], bool],
    forced: Callable[[Cell], bool] = lambda cell: False,
    checkpoints: str = ".nadpipe/checkpoints",
) -> list[Batch]:
    """The batches of this run: per batch key, the stale cells whose model can be stacked, in
    the grid's order, `size` at a time (a cell alone in its chunk trains in its own job); their
    checkpoints in the folder `checkpoints`."""
    if size <= 1:
        return []
    by_key: dict[str, list[Cell]] = {}
    for cell in cells:  # stackable probes a model (torch): only for the stale cells
        if stale(cell, forced(cell)) and stackable(cell.job):
            by_key.setdefault(batch_key(cell.job), []).append(cell)
    out = []
    for group in by_key.values():
        for start in range(0, len(group), size):
            chunk = group[start : start + size]
            if len(chunk) > 1:
                jobs = tuple(plain(c.job) for c in chunk)
                out.append(
                    Batch(
                        f"train_together_{len(out) + 1}",
                        jobs,
                        tuple(c.ahead for c in chunk),
                        chunk[0].nads,  # the batch key holds the NADs and CIFAR settings
                        chunk[0].cifar,
                        os.path.join(checkpoints, f"{_digest(jobs)}.ckpt"),
                    )
                )
    return out
