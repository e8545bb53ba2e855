"""The result row declared once (nadpipe.row): the jobs cannot write an undeclared column, and
the declaration is what docs/summary.md says. (Every column of a real study's summary is
declared: tests/test_workflow.py, tests/test_cifar.py.)"""

import re
import sys

import pytest
from conftest import REPO

from nadpipe import row
from nadpipe.studies import REGISTRY


def _rows(rows=None, **change):
    values = dict(
        key={"study": "s", "arch": "a", "variant": "i0_j1", "protocol": None, "seed": 0},
        variant={"nad_i": 0, "nad_j": 1},
        settings={"model": "mlp", "n_train": 10, "n_test": 10, "nad_source": None,
                  "nad_file": None},
        data={"eps1": 1.0},
        train={"epochs": 1},
        nads={"nad_step": 100.0},
        outcome={"outcome": "fit", "outcome_reason": None},
        facts={"device": "cpu"},
        provenance={"torch_version": "2"},
        measures={"reliance_deg": 12.0, "band_only_0_9": 0.9},
        run={"host": "h", "slurm_job_id": None},
    )  # fmt: skip
    rows = rows or [{"split": "test", "condition": "both", "accuracy": 0.5, "loss": 0.69}]
    return row.model_rows(rows, {**values, **change})


def test_a_model_row_holds_every_group_in_key_order():
    (r,) = _rows()
    assert list(r)[:8] == ["study", "arch", "variant", "nad_i", "nad_j", "protocol", "seed",
                           "split"]  # fmt: skip
    assert r["reliance_deg"] == 12.0 and r["band_only_0_9"] == 0.9 and r["slurm_job_id"] is None


@pytest.mark.parametrize(
    "change, group",
    [
        ({"measures": {"reliance_angle": 1.0}}, "measures"),
        ({"facts": {"gpu": "x"}}, "facts"),
        ({"run": {"seconds": 1.0}}, "run"),
        ({"train": {"epoch": 1}}, "train"),
        ({"nads": {"step": 100.0}}, "nads"),
        ({"rows": [{"split": "test", "condition": "both", "acc": 1.0}]}, "result"),
        ({"settings": {"n_samples": 1}}, "settings"),
    ],
)
def test_an_undeclared_column_is_refused_naming_its_group(change, group):
    with pytest.raises(KeyError, match=rf"not declared in nadpipe.row's group '{group}'"):
        _rows(**change)


def test_docs_summary_md_lists_every_declared_column():
    sys.path.insert(0, str(REPO / "docs"))
    import generate

    page = generate.summary_page()
    assert (REPO / "docs/summary.md").read_text() == page  # generated, up to date
    listed = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    fixed = {n for g in row.GROUPS for n in row.names(g)}
    assert fixed <= listed
    for entry in REGISTRY.values():
        assert set(entry.variant.COLUMNS) <= listed
        assert set(entry.data_keys) - {"n_train", "n_test"} <= listed
    assert set(row.nad_columns()) <= listed
    assert set(row.train_columns()) - set(row.names(row.FACTS)) <= listed
    # every column has a meaning
    for line in page.splitlines():
        if line.startswith("| `"):
            cells = re.split(r"(?<!\\)\|", line)  # a bar in a meaning is escaped
            assert len(cells) == 5 and cells[3].strip(), line


def test_every_variant_declares_the_columns_it_writes():
    # the examples are the registry's own cells (b879b52 kept a map of paths by class name)
    for entry in REGISTRY.values():
        for cell in entry.variants(entry.settings()):
            again = entry.variant.parse(cell.path)
            assert again == cell and again.path == cell.path
            assert list(again.columns()) == list(entry.variant.COLUMNS)


# a training record as 0.10.1 wrote it (the JSON keys are kept): unset run facts were ""
RECORD_0_10 = {
    "study": "nad_pairs", "arch": "lenet", "variant": "i0_j1", "seed": 0,
    "model": {"model": "lenet"}, "train": {"epochs": 2}, "applied": {"bf16": False,
    "channels_last": False, "compile": False}, "data": {"eps1": 1.0}, "data_sha256": "ab",
    "history": [{"epoch": 1, "loss": 0.7, "train_accuracy": 0.5},
                {"epoch": 2, "loss": 0.25, "train_accuracy": 0.9}],
    "test_accuracy": 0.875, "diverged": False, "diverged_epoch": None,
    "trained_with_seeds": 1, "trained_together": 4, "cell_key": "c", "spec_key": "s",
    "train_seconds": 1.5, "device": "cpu", "deterministic": False, "tf32": False,
    "host": "h", "slurm_job_id": "", "cuda_visible_devices": "", "provenance": {"v": 1},
}  # fmt: skip


def test_the_training_record_fills_the_groups_it_declares():
    from nadpipe.record import DERIVED, GROUPS, TrainingRecord, declared

    record = TrainingRecord.from_json(RECORD_0_10)
    for group in GROUPS:
        columns = record.columns(group)
        assert list(columns) == [name for name, _, _ in declared(group)], group
        for name, value in columns.items():  # a field's value, or what it is derived from
            if name in DERIVED:
                assert value == DERIVED[name][3](record), name
            else:
                owner = next(o for o in (record, record.applied, record.where) if hasattr(o, name))
                field = getattr(owner, name)
                assert value == field or (value != value and field != field), name  # NaN: unset
        # ... which are the row's group, less what the evaluation decides: declared after them
        ours = row.names(next(g for g in row.GROUPS if g.name == group))
        assert ours[: len(columns)] == list(columns), group
    assert record.columns("outcome")["final_train_loss"] == RECORD_0_10["history"][-1]["loss"]
    assert record.columns("run")["slurm_job_id"] is None  # 0.10 wrote "" for unset
    # written back, the same keys (null where 0.10 wrote ""), read back equal
    again = record.to_json()
    added = set(again) - set(RECORD_0_10)  # fields since, at their defaults
    assert set(RECORD_0_10) <= set(again) and again["slurm_job_id"] is None
    assert all(again[k] == getattr(TrainingRecord, k, again[k]) or again[k] != again[k]
               for k in added)  # fmt: skip
    assert TrainingRecord.from_json(again) == record
    assert "train loss 0.2500, train accuracy 0.900, test accuracy 0.875" in record.outcome_line()


def test_a_fact_added_to_the_record_reaches_the_row_declaration(monkeypatch):
    # the change cost of a recorded fact: one field in nadpipe.record, nothing in nadpipe.row
    import dataclasses

    from nadpipe import record

    @dataclasses.dataclass(frozen=True)
    class Wider(record.TrainingRecord):
        peak_memory: float = record.column(record.FACTS, "MiB", "peak device memory", default=0.0)

    monkeypatch.setattr(record, "TrainingRecord", Wider)
    assert ("peak_memory", "MiB", "peak device memory") in record.declared(record.FACTS)
    assert Wider.from_json(RECORD_0_10).columns(record.FACTS)["peak_memory"] == 0.0
