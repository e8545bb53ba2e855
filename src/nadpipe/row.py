"""The result row, declared once: every column of summary.parquet and runs.parquet, in groups,
with its unit and meaning. Torch-free.

The evaluation job fills one row per (split, condition) of a model (`model_rows`, which refuses a
column not declared here; the `outcome`, `facts` and `run` groups take the columns the training
record declares, nadpipe.record, and add those the evaluation decides), the aggregate concatenates
them and moves the `RUN` group to runs.parquet, and docs/summary.md is written from this module
(`markdown`, by docs/generate.py; tests/test_docs.py checks it). Columns whose names come from
elsewhere are declared as families: a study's variant columns (its variant's `COLUMNS`), its data
settings (the study block's keys), the training settings (`settings.TrainSettings`), the NAD
settings (`nad_` + `settings.NadSettings`) and the NAD bands (`band_without_A_B`, `band_only_A_B`).
A value that does not exist is null (None), never "" or 0.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from . import record
from .settings import NadSettings, TrainSettings


@dataclass(frozen=True)
class Column:
    name: str
    unit: str  # "" for a name or a flag
    meaning: str


@dataclass(frozen=True)
class Group:
    name: str
    about: str
    columns: tuple[Column, ...] = ()
    table: str = "summary"  # or "runs": per model, what differs from run to run


def _recorded(group: str) -> tuple[Column, ...]:
    """The columns of a row group that the training record fills (nadpipe.record)."""
    return tuple(Column(*c) for c in record.declared(group))


FRACTION = "fraction, 0 to 1"
KEY = Group(
    "key",
    "which model, which evaluation: together unique per row",
    (
        Column("study", "", "the study (a registry name)"),
        Column("arch", "", "the architecture's name under `architectures`"),
        Column("variant", "", "the cell, as its file name (`i0_j100`; `NAME__i0_j100` under a "
               "named protocol)"),
        Column("protocol", "", "the cell's named protocol (`STUDY.protocols`); null without one"),
        Column("seed", "", "the training seed (data, initialisation, batch order)"),
        Column("split", "", "`train` or `test`"),
        Column("condition", "", "what the inputs keep: pairs `both`, `ch1_only`, `ch2_only`; "
               "CIFAR ⊕ D(v) `all`, `cifar_only`, `synthetic_only`; the others `all`"),
    ),
)  # fmt: skip
VARIANT = Group("variant", "the study's own key columns, from its variant (family)")
RESULT = Group(
    "result",
    "the row's evaluation",
    (
        Column("accuracy", FRACTION, "accuracy under the row's condition (NaN: diverged)"),
        Column("loss", "nats", "mean cross-entropy under the row's condition"),
    ),
)
SETTINGS = Group(
    "settings",
    "what the model was made from (per model: repeated on its rows)",
    (
        Column("model", "", "the architecture's model (registry name or `module:callable`)"),
        Column("n_train", "samples", "training samples, as built"),
        Column("n_test", "samples", "test samples, as built"),
        Column("nad_source", "", "the architecture whose NADs the data use (null: no NADs)"),
        Column("nad_file", "", "the file the NADs were read from (null: computed)"),
    ),
)
DATA = Group("data", "the study block's data settings, as in the config (family)")
TRAIN = Group(
    "train",
    "the training settings, as asked (family: `settings.TrainSettings`; bf16, channels_last "
    "and compile as they took effect, under facts)",
)
NADS = Group("nads", "the NAD settings, as `nad_` + the key (family: `settings.NadSettings`)")
OUTCOME = Group(
    "outcome",
    "how the training went (per model)",
    (
        *_recorded(record.OUTCOME),
        Column("outcome", "", "how the training went: `fit` (training accuracy above "
               "guessing); `did not fit` (its measures are NaN); `diverged`. Whether it learned "
               "is its test accuracy's question (the findings)"),
        Column("outcome_reason", "", "why not `fit`, with the accuracy; null when fit"),
    ),
)  # fmt: skip
FACTS = Group("facts", "where and how the model trained (per model)", _recorded(record.FACTS))
PROVENANCE = Group(
    "provenance",
    "the library that made the row (nadpipe.provenance)",
    (
        Column("nadpipe_version", "", "nadpipe's version"),
        Column("nadpipe_source", "", "sha256 of nadpipe's source files, and a user model's"),
        Column("torch_version", "", "torch's version"),
    ),
)
MEASURES = Group(
    "measures",
    "the study's measures (per model; NaN for a model that did not fit, the setting-like "
    "`margin_max` and `relu_units` excepted)",
    (
        Column("reliance_deg", "degrees", "pairs: angle of the mean input gradient's (|∇f·u₂|, "
               "|∇f·u₁|): 0 relies on channel 1 alone, 90 on channel 2"),
        Column("grad_along_v1", "logit per input unit", "pairs: mean |∇f·u₁|"),
        Column("grad_along_v2", "logit per input unit", "pairs: mean |∇f·u₂|"),
        Column("margin_v1", "input units (L2)", "pairs: median distance to the boundary along "
               "u₁ (inf: most points have none within `margin_max`)"),
        Column("margin_v2", "input units (L2)", "pairs: the same along u₂"),
        Column("margin_v1_found", FRACTION, "pairs: points with a boundary along u₁ in reach"),
        Column("margin_v2_found", FRACTION, "pairs: the same along u₂"),
        Column("margin_max", "input units (L2)", "pairs: the search's reach (a setting)"),
        Column("jacobian_norm_test", "per input unit", "pairs: mean Frobenius norm of the "
               "softmax's input Jacobian on test points"),
        Column("jacobian_norm_train", "per input unit", "pairs: the same on training points"),
        Column("transitions_same_class", "count per ellipse", "pairs: activation-pattern "
               "changes along closed ellipses through two points of one class (NaN without "
               "ReLU modules)"),
        Column("transitions_diff_class", "count per ellipse", "pairs: the same, two classes"),
        Column("transitions_random", "count per ellipse", "pairs: the same, random ellipses"),
        Column("relu_units", "count", "pairs: ReLU units the transitions count over"),
        Column("v_vs_cifar_reliance_deg", "degrees", "`cifar_nad`: angle between the input "
               "gradient along v and its norm on the CIFAR channels (0: uses only v)"),
        Column("v_vs_cifar_grad_along_v", "logit per input unit", "`cifar_nad`: mean |∇f·u|"),
        Column("v_vs_cifar_grad_on_channels", "logit per input unit", "`cifar_nad`: mean norm "
               "of ∇f on the CIFAR channels"),
        Column("band_without_A_B", FRACTION, "with `analysis.nad_bands`: test accuracy with "
               "the components along NADs A…B removed (family: one per band)"),
        Column("band_only_A_B", FRACTION, "the same with only NADs A…B kept"),
    ),
)  # fmt: skip
REFERENCES = Group(
    "references",
    "with `STUDY.references`: the published table, per cell and per protocol",
    (
        Column("reference_accuracy", FRACTION, "the cell's published accuracy (a table in "
               "percent is divided by 100)"),
        Column("reference_mean_abs_diff", "percentage points", "the protocol's mean "
               "|difference| from the published table"),
        Column("reference_max_abs_diff", "percentage points", "its largest |difference|"),
        Column("reference_pearson", "r, −1 to 1", "Pearson's r against the published table"),
        Column("reference_cells", "count", "the cells in common it is computed over"),
    ),
)  # fmt: skip
RUN = Group(
    "run",
    "what differs from run to run, in runs.parquet (one row per model), so that the same "
    "config gives a byte-identical summary.parquet on CPU",
    (
        *_recorded(record.RUN),
        Column("eval_seconds", "s", "wall time of the evaluation's measures"),
        Column("eval_cpu_seconds", "s", "CPU time of the evaluation's measures, every thread"),
        Column("eval_peak_mib", "MiB", "peak resident memory of the process that evaluated it"),
    ),
    table="runs",
)
GROUPS = (KEY, VARIANT, RESULT, SETTINGS, DATA, TRAIN, NADS, OUTCOME, FACTS, PROVENANCE,
          MEASURES, REFERENCES, RUN)  # fmt: skip
FAMILY = re.compile(r"band_(without|only)_\d+_\d+")


def names(group: Group) -> list[str]:
    return [c.name for c in group.columns]


def train_columns() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainSettings)]


def nad_columns() -> list[str]:
    return [f"nad_{f.name}" for f in dataclasses.fields(NadSettings)]


def measure_declared(name: str) -> bool:
    return name in names(MEASURES) or bool(FAMILY.fullmatch(name))


def declared(name: str, variant: tuple[str, ...] = (), data: tuple[str, ...] = ()) -> bool:
    """Whether a column is declared, for a study with these variant and data columns."""
    fixed = {n for g in GROUPS for n in names(g)}
    return (
        name in fixed
        or name in variant
        or name in data
        or name in train_columns()
        or name in nad_columns()
        or measure_declared(name)
    )


def model_rows(rows: list[dict], values: dict[str, dict]) -> list[dict]:
    """A model's rows, one per evaluation in `rows` (split, condition, accuracy, loss), each
    with every group's `values` (by group name; the record's groups as
    `TrainingRecord.columns` gives them), in the declared order: the key with the variant's
    columns after `variant`, then the groups. A column a group does not declare is refused
    (declare it above first)."""
    for group in GROUPS:
        _check(group, values.get(group.name, {}))
    for r in rows:
        _check(RESULT, {k: v for k, v in r.items() if k not in ("split", "condition")})
    key = names(KEY)
    cut = key.index("variant") + 1
    model = {k: v for g in GROUPS[3:] for k, v in values.get(g.name, {}).items()}
    out = []
    for r in rows:
        keys = {**values[KEY.name], **r}
        head = {k: keys[k] for k in key[:cut]} | values.get(VARIANT.name, {})
        tail = {k: keys[k] for k in key[cut:]}
        out.append(head | tail | {k: v for k, v in r.items() if k not in tail} | model)
    return out


def _check(group: Group, values: dict) -> None:
    if group in (VARIANT, DATA):  # the study's own (its variant's COLUMNS, its block's keys)
        return
    allowed = {TRAIN: train_columns, NADS: nad_columns}.get(group, lambda: names(group))()
    extra = sorted(
        k for k in values if k not in allowed and not (group is MEASURES and FAMILY.fullmatch(k))
    )
    if extra:
        raise KeyError(f"columns {extra} are not declared in nadpipe.row's group {group.name!r}")


def sort_columns(variant: list[str]) -> list[str]:
    """The key a study's summary is sorted by: architecture, protocol, the variant's columns,
    seed, split, condition."""
    return ["arch", "protocol", *variant, "seed", "split", "condition"]


def _cell(text: str) -> str:
    """Text for a markdown table cell: a bar escaped (key descriptions come escaped already)."""
    return text.replace("\\|", "|").replace("|", "\\|")


def markdown(
    studies: dict[str, tuple[dict[str, str], dict[str, str]]], keys: dict[str, str]
) -> str:
    """docs/summary.md: every group and column. `studies`: per study, its variant columns and
    its data settings (name -> meaning); `keys`: a config key's description (schema)."""
    out = [
        "# `summary.parquet` and `runs.parquet`",
        "",
        "<!-- written by docs/generate.py from nadpipe.row; do not edit -->",
        "",
        "One row of `summary.parquet` per (arch, variant, seed, split, condition) of a study, "
        "sorted by that key; per-model columns repeat on the model's rows. `runs.parquet` has "
        "one row per model: its key and the `run` group. Every accuracy column is a fraction "
        "(0 to 1). A value that does not exist is null.",
        "",
    ]
    for group in GROUPS:
        out += [f"## {group.name}: {group.about}", "", "| column | unit | meaning |",
                "| --- | --- | --- |"]  # fmt: skip
        if group is VARIANT:
            for study, (variant, _) in studies.items():
                out += [f"| `{n}` | | `{study}`: {_cell(m)} |" for n, m in variant.items()]
        elif group is DATA:
            for study, (_, data) in studies.items():
                out += [f"| `{n}` | | `{study}`: {_cell(m)} |" for n, m in data.items()]
        elif group is TRAIN:  # those that may not take effect: as they did, under facts
            out += [f"| `{n}` | | {keys.get(f'train.{n}', '')} |" for n in train_columns()
                    if n not in names(FACTS)]  # fmt: skip
        elif group is NADS:
            out += [f"| `nad_{n[4:]}` | | {keys.get(f'nads.{n[4:]}', '')} |" for n in nad_columns()]
        out += [f"| `{c.name}` | {c.unit} | {_cell(c.meaning)} |" for c in group.columns]
        out.append("")
    out += [
        "```python",
        "import pandas as pd",
        "",
        'df = pd.read_parquet("results/nad_pairs/summary.parquet")',
        'ood = df[df.split == "test"].pivot_table(',
        '    index=["arch", "nad_i", "nad_j"], columns="condition", values="accuracy", '
        'aggfunc="mean"',
        ")",
        "```",
        "",
    ]
    return "\n".join(out)
