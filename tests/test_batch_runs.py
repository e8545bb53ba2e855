"""Batching in real runs (nadpipe.batching): whatever the batching, a run trains exactly the new
or changed cells; the cells a batch's job trains ask for no GPU when they run (as Snakemake's
scheduler gave it, from its log); reruns forced or caused by recomputed NADs train together."""

import json
from pathlib import Path

import pytest
import yaml
from helpers import jobs_run, snakemake

CONFIG = {
    "architectures": {"lenet": {}},
    "nads": {"n_networks": 24},
    "nad_pairs": {
        "architectures": ["lenet"],
        "indices": [0, 1],
        "seeds": [0],
        "n_train": 200,
        "n_test": 100,
        "train": {"epochs": 1},
    },
}


class Study:
    """A tiny NAD-pair study of LeNet in a folder, run for real, its config edited between runs."""

    def __init__(self, folder: Path):
        self.folder, self.config = folder, json.loads(json.dumps(CONFIG))

    def run(self, *args: str) -> list[tuple[str, str, int | None]]:
        (self.folder / "config.yaml").write_text(yaml.safe_dump(self.config))
        res = snakemake(self.folder, "--cores", "2", *self.records(), *args)
        return jobs_run(res.stdout + res.stderr)

    def records(self) -> list[str]:
        s = self.config["nad_pairs"]
        return [f"results/nad_pairs/models/lenet/i{i}_j{j}_s{seed}.json"
                for i in s["indices"] for j in s["indices"] for seed in s["seeds"]]  # fmt: skip

    def times(self) -> dict[str, int]:
        return {r: (self.folder / r).stat().st_mtime_ns for r in self.records()}


def _trained(jobs) -> list[str]:
    return sorted(w for rule, w, _ in jobs if rule == "train")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    s = Study(tmp_path_factory.mktemp("batching"))
    jobs = s.run()  # on this CPU: one cell per job
    assert len(_trained(jobs)) == 4 and not [r for r, _, _ in jobs if "together" in r]
    return s


def test_batching_never_reruns_a_cell_and_batches_only_new_ones(study):
    before = study.times()
    # a config moved to a GPU machine (64 there), or batch_cells set: nothing retrains
    for size in (2, 64):
        study.config["gpus"] = {"batch_cells": size}
        assert not _trained(study.run()), size
    assert study.times() == before
    # a seed added: exactly its 4 cells train, two by two; each cell's own job asks no GPU
    study.config["gpus"] = {"batch_cells": 2}
    study.config["nad_pairs"]["seeds"] = [0, 1]
    jobs = study.run()
    trained = _trained(jobs)
    assert len(trained) == 4 and all("seed=1" in w for w in trained)
    together = [(r, g) for r, _, g in jobs if r.startswith("train_together_")]
    assert len(together) == 2 and all(g == 1 for _, g in together)  # one GPU job per batch
    assert all(g == 0 for r, _, g in jobs if r == "train"), jobs
    now = study.times()
    assert all(now[r] == t for r, t in before.items())  # the seed-0 cells untouched
    for r in now:
        if r not in before:
            assert json.loads((study.folder / r).read_text())["trained_together"] == 2
    # an index added: its 10 new cells (5 per seed), the 8 others untouched
    study.config["nad_pairs"]["indices"] = [0, 1, 2]
    jobs = study.run()
    assert len(_trained(jobs)) == 10
    assert len([r for r, _, _ in jobs if r.startswith("train_together_")]) == 5
    assert all(study.times()[r] == t for r, t in now.items())
    # back to the CPU's one cell per job: nothing
    study.config.pop("gpus")
    assert not _trained(study.run())


def test_forced_reruns_and_recomputed_nads_train_together(study):
    study.config["gpus"] = {"batch_cells": 3}
    n = len(study.records())
    jobs = study.run("--forcerun", "train")
    assert len(_trained(jobs)) == n and all(g == 0 for r, _, g in jobs if r == "train")
    assert len([r for r, _, _ in jobs if r.startswith("train_together_")]) == -(-n // 3)
    # NADs recomputed: every cell reads them, every cell retrains, together
    jobs = study.run("--forcerun", "nads")
    assert [r for r, _, _ in jobs].count("nads") == 1
    assert len(_trained(jobs)) == n and all(g == 0 for r, _, g in jobs if r == "train")
    assert not list((study.folder / "results/.nadpipe/ahead").glob("**/*.pt"))  # all claimed
