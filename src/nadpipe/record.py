"""The training record, declared once: what a training job writes beside a model's weights
(`records/…json`, and inside a batch's ahead file) and its evaluation reads. Torch-free.

Its fields that become summary columns say so in their metadata (`column(group, unit,
meaning)`): nadpipe.row builds its `outcome`, `facts` and `run` groups from them, and the
evaluation fills those groups with `TrainingRecord.columns(group)`, so a fact added here reaches
the row, runs.parquet and docs/summary.md without being spelled again. The JSON keeps the keys
of the records of earlier versions (`from_json` reads those too)."""

from __future__ import annotations

import dataclasses
import math
import os
import platform
from dataclasses import dataclass, field
from typing import Any

OUTCOME, FACTS, RUN = "outcome", "facts", "run"  # the row groups a record fills
GROUPS = (OUTCOME, FACTS, RUN)


def column(group: str, unit: str, meaning: str, **kwargs) -> Any:
    """A field that is a summary column of `group` (nadpipe.row), with its unit and meaning."""
    return field(metadata={"group": group, "unit": unit, "meaning": meaning}, **kwargs)


@dataclass(frozen=True)
class Applied:
    """The speed settings that took effect (nadpipe.train.applied): asked is not done."""

    bf16: bool = column(FACTS, "", "bf16 autocast took effect (train.precision)", default=False)
    channels_last: bool = column(
        FACTS, "", "channels-last took effect (only for a model alone)", default=False
    )
    compile: bool = column(
        FACTS, "", "torch.compile took effect (only for a model alone)", default=False
    )


@dataclass(frozen=True)
class Where:
    """Where a job ran (from its environment): null where not set."""

    host: str = column(RUN, "", "the machine's name", default="")
    slurm_job_id: str | None = column(RUN, "", "the SLURM job; null outside SLURM", default=None)
    cuda_visible_devices: str | None = column(
        RUN, "", "the GPU(s) the job was given; null: none set", default=None
    )

    @classmethod
    def here(cls) -> Where:
        env = os.environ
        return cls(
            platform.node(),
            env.get("SLURM_JOB_ID") or None,
            env.get("CUDA_VISIBLE_DEVICES") or None,
        )


@dataclass(frozen=True)
class TrainingRecord:
    """One trained model: which cell, its settings, how the training went, where it ran."""

    study: str
    arch: str
    variant: str
    seed: int
    model: dict  # settings.ModelSpec, as plain values
    train: dict  # settings.TrainSettings as asked, as plain values
    data: dict  # the cell's data settings
    data_sha256: str  # of the training and test tensors (the evaluation rebuilds and compares)
    history: list[dict]  # per epoch: epoch, loss, train_accuracy, …
    test_accuracy: float  # NaN when diverged
    spec_key: str  # nadpipe.batching: the spec and library source it was trained for
    cell_key: str | None  # a one-seed cell's key (claims of a batch check it); None: several
    trained_with_seeds: int  # seeds in its job (one ensemble)
    trained_together: int  # models in its training (a batch of cells, or the seeds)
    provenance: dict  # nadpipe.provenance at training time
    diverged: bool = column(
        OUTCOME, "", "the loss became NaN or inf (its rows' accuracies are NaN)", default=False
    )
    diverged_epoch: int | None = column(
        OUTCOME, "epoch", "the first epoch with a NaN/inf loss; null: none", default=None
    )
    device: str = column(FACTS, "", "`cpu`, or the GPU's name", default="cpu")
    deterministic: bool = column(FACTS, "", "deterministic CUDA algorithms were on", default=False)
    tf32: bool = column(FACTS, "", "TF32 matmuls were allowed", default=False)
    applied: Applied = field(default_factory=Applied)
    train_seconds: float = column(
        RUN, "s", "wall time of the training (its share of a batch)", default=math.nan
    )
    train_cpu_seconds: float = column(
        RUN, "s", "CPU time of the training, every thread (its share of a batch)", default=math.nan
    )
    train_peak_mib: float = column(
        RUN, "MiB", "peak resident memory of the process that trained it", default=math.nan
    )
    where: Where = field(default_factory=Where)

    @property
    def final_train_loss(self) -> float:
        return self.history[-1]["loss"]

    def columns(self, group: str) -> dict:
        """This record's values of a row group's columns (`OUTCOME`, `FACTS`, `RUN`), in the
        order `declared` gives."""
        out = {name: of(self) for name, (g, _, _, of) in DERIVED.items() if g == group}
        for f, owner in _fields(type(self), self):
            if f.metadata.get("group") == group:
                out[f.name] = getattr(owner, f.name)
        return out

    def outcome_line(self) -> str:
        """The training's end in words."""
        end = self.history[-1]
        line = (
            f"train loss {end['loss']:.4f}, train accuracy {end['train_accuracy']:.3f}, "
            f"test accuracy {self.test_accuracy:.3f}"
        )
        return line + (f", DIVERGED in epoch {self.diverged_epoch}" if self.diverged else "")

    def to_json(self) -> dict:
        """As written: the nested `applied`, and where it ran as top-level keys."""
        out = dataclasses.asdict(self)
        out.update(out.pop("where"))
        return out

    @classmethod
    def from_json(cls, raw: dict) -> TrainingRecord:
        """A record as written, by this version or an earlier one (whose `applied` may be
        missing and whose unset environment values are "")."""
        own = {f.name for f in dataclasses.fields(cls)} - {"applied", "where"}
        where = {f.name: raw.get(f.name) for f in dataclasses.fields(Where) if f.name in raw}
        where = {k: v or (None if k != "host" else "") for k, v in where.items()}
        return cls(
            **{k: v for k, v in raw.items() if k in own},
            applied=Applied(**raw.get("applied", {})),
            where=Where(**where),
        )


# the summary columns a record derives from its fields: name -> (group, unit, meaning, value)
DERIVED = {
    "final_train_loss": (
        OUTCOME,
        "nats",
        "the last epoch's mean training loss",
        lambda r: r.final_train_loss,
    ),
}


def declared(group: str) -> list[tuple[str, str, str]]:
    """(name, unit, meaning) of the columns of `group` a record fills, in order."""
    out = [(n, u, m) for n, (g, u, m, _) in DERIVED.items() if g == group]
    for f, _ in _fields(TrainingRecord, None):
        if f.metadata.get("group") == group:
            out.append((f.name, f.metadata["unit"], f.metadata["meaning"]))
    return out


def _fields(cls, obj):
    """(field, the object holding it) of `cls` and of its nested Applied and Where, in order."""
    for f in dataclasses.fields(cls):
        if f.name in ("applied", "where"):
            inner = getattr(obj, f.name) if obj is not None else None
            nested = Applied if f.name == "applied" else Where
            yield from ((g, inner) for g in dataclasses.fields(nested))
        else:
            yield f, obj
