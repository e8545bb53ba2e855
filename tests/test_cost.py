"""What a run costs before it runs (nadpipe.cost): each job's size from its spec, its price from
this machine's records, else from its records at another size, else measured now; and the line
a dry run ends with."""

import json
import math
import os
import re
from dataclasses import replace

import yaml
from conftest import SCHEMA
from helpers import TINY, snakemake_here

from nadpipe import config as nc
from nadpipe import cost
from nadpipe.grid import Plan
from nadpipe.usage import clock


def _plan(tmp_path, change: dict | None = None) -> Plan:
    cfg = nc.load_config({**TINY, **(change or {})}, SCHEMA)[0]
    return Plan(cfg, str(tmp_path / "results"))


def test_a_jobs_size_is_what_its_spec_scales_with(tmp_path):
    plan = _plan(tmp_path)
    cell = plan.cells("nad_pairs")[0]
    s = cost.size("train", plan.train_job(cell.study, cell.arch, cell.variant, (cell.seed,)))
    train = TINY["nad_pairs"]
    assert (s.kind, s.arch, s.reps, s.n) == (
        "train",
        "mlp",
        train["train"]["epochs"],
        train["n_train"],
    )
    evaluation = cost.size("evaluate", plan.eval_job(*cell.__dict__.values()))
    assert (evaluation.kind, evaluation.reps, evaluation.n) == ("evaluate", 1, train["n_train"])
    nads = cost.size("nads", plan.nad_job("mlp"))
    assert (nads.kind, nads.n) == ("nads", TINY["nads"]["n_networks"])
    # another size of the same job keeps its key; another model does not
    more = _plan(tmp_path, {"nads": {"n_networks": 96}})
    assert cost.size("nads", more.nad_job("mlp")).key == nads.key
    wider = _plan(
        tmp_path, {"architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [32]}}}}
    )
    assert cost.size("nads", wider.nad_job("mlp")).key != nads.key
    # a merge of shards, a figure: small jobs
    assert cost.size("nads", plan.nad_job("mlp"), merges=True).arch is None
    assert cost.size("plot", None) == cost.Size("plot", None, "plot")


def test_a_price_comes_from_records_then_other_sizes_then_a_probe():
    s = cost.Size("train", "lenet", "k", reps=10, n=2000)
    same = {"kind": "train", "arch": "lenet", "key": "k", "units": 20000, "cpu": 4.0}
    other = {**same, "key": "other", "units": 10000, "cpu": 1.0}
    assert cost.price(s, [same, other], {}) == cost.Price(4.0, "records")
    assert cost.price(s, [other], {}) == cost.Price(2.0, "scaled")  # 1 CPU-s per 10 000 units
    probes: dict = {}
    measured = cost.price(s, [], probes, lambda: (0.1, 0.0002))
    assert measured.source == "measured" and math.isclose(measured.cpu, 10 * (0.1 + 0.4))
    probes, calls = {}, []

    def fails():
        calls.append(1)
        return 1 / 0

    for _ in range(3):  # a probe that fails is tried once per key, not once per job
        failed = cost.price(cost.Size("train", "x", "y"), [], probes, fails)
        assert failed.source == "none" and "ZeroDivisionError" in failed.why
    assert len(calls) == 1
    assert cost.price(cost.Size("plot", None, "plot"), [], {}).source == "light"


def test_a_fresh_dry_run_measures_each_model_once_and_ends_with_the_cost(tmp_path):
    # no record on this machine and an empty cache: the models are measured now, then kept
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    env = {**os.environ, "NADPIPE_CACHE": str(tmp_path / "cache"), cost.PROBES_ENV: "measure"}
    first = snakemake_here(tmp_path, "-n", "--cores", "2", env=env)
    line = re.search(r"^nadpipe: the cost of results/ here: (\d+) jobs \((.*?)\), about "
                     r"(.*?) on 2 cores at this machine's load now \((.*?)\); (.*?) of CPU, "
                     r"(.*?) of it start-up \((.*)\)$", first.stdout + first.stderr,
                     re.M)  # fmt: skip
    assert line is not None, first.stderr[-2000:]
    stats = re.search(r"^total\s+(\d+)$", first.stdout + first.stderr, re.M)
    assert int(line[1]) == int(stats[1])  # every job Snakemake planned
    assert "train 1" in line[2] and "evaluate 1" in line[2] and "nads 1" in line[2]
    measured = re.search(r"([a-z, ]+): measured now on this machine", line[7])[1].split(", ")
    assert sorted(measured) == ["evaluate", "nads", "train"]
    kept = (tmp_path / "cache/probes.jsonl").read_text().splitlines()
    assert len(kept) == 3 and all(json.loads(r)["per"] >= 0 for r in kept)
    again = snakemake_here(tmp_path, "-n", "--cores", "2", env=env)
    # the same price, from the cache (the time at the load then may differ)
    assert (
        f"; {line[5]} of CPU, {line[6]} of it start-up ({line[7]})" in again.stdout + again.stderr
    )
    assert (tmp_path / "cache/probes.jsonl").read_text().splitlines() == kept


def test_a_damaged_cost_cache_is_named_entry_by_entry_and_measured_again(tmp_path):
    # 10c1e0f: a kept probe was trusted: "about -1799993 s", "KeyError: 'key'"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**TINY, "results": "logs/x"}))
    env = {**os.environ, "NADPIPE_CACHE": str(tmp_path / "cache"), cost.PROBES_ENV: "measure"}
    first = snakemake_here(tmp_path, "-n", "--cores", "2", env=env)
    # a results folder in a folder that does not exist yet is priced (10c1e0f: "no cost
    # estimate (FileNotFoundError ...)")
    out = first.stdout + first.stderr
    line = re.search(r"^nadpipe: the cost of logs/x/ here: .*$", out, re.M)
    assert line is not None and "no cost estimate" not in out, out[-2000:]
    cache = tmp_path / "cache/probes.jsonl"
    kept = [json.loads(r) for r in cache.read_text().splitlines()]
    bad = [{**kept[0], "fixed": -1799993.0}, {k: v for k, v in kept[1].items() if k != "key"}]
    cache.write_text("\n".join([*map(json.dumps, bad), "garbage", json.dumps(kept[2])]) + "\n")
    again = snakemake_here(tmp_path, "-n", "--cores", "2", env=env)
    out = again.stdout + again.stderr
    said = f"{cache}: line(s) 1, 2, 3 are no probe nadpipe wrote"
    assert said in out and "left out" in out, out[-2000:]
    priced = re.search(r"^nadpipe: the cost of logs/x/ here: \d+ jobs .*, about \d", out, re.M)
    assert priced is not None and "measured now on this machine" in out  # not the damage
    rows = [json.loads(r) for r in cache.read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == sorted(r["key"] for r in kept)
    assert all(r["fixed"] >= 0 and r["per"] >= 0 for r in rows)
    # a cost record that is none is left out, named; the others price
    records = tmp_path / "logs/x/.nadpipe/costs.jsonl"
    records.parent.mkdir(parents=True)
    good = {"kind": "train", "arch": "mlp", "key": "k", "cpu": 2.0, "units": 4, "host": cost.host()}
    records.write_text("\n".join([json.dumps(good), json.dumps({**good, "cpu": -1}),
                                   json.dumps({**good, "units": "x"}), "{"]) + "\n")  # fmt: skip
    assert cost.records(str(tmp_path / "logs/x")) == [good]


def test_a_dry_run_priced_from_records_alone_says_what_it_did_not_price(tmp_path):
    # NADPIPE_DRY_RUN_COST=records (the suite's setting): no model measured, each said unpriced
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    env = {**os.environ, "NADPIPE_CACHE": str(tmp_path / "cache"), cost.PROBES_ENV: "records"}
    res = snakemake_here(tmp_path, "-n", "--cores", "2", env=env)
    line = re.search(r"^nadpipe: the cost of results/ here: .*$", res.stdout + res.stderr, re.M)[0]
    assert "3 job(s) not priced, e.g. evaluate of mlp: no record, no probe" in line, line
    assert not (tmp_path / "cache/probes.jsonl").exists()


def test_a_seed_ensemble_is_priced_as_a_training_of_all_its_seeds(tmp_path):
    # its rule is the study's own (train_nad_pairs_seeds): the plan says what job it runs
    plan = _plan(tmp_path, {"nad_pairs": {**TINY["nad_pairs"], "seeds": [0, 1, 2],
                                          "group_seeds": True}})  # fmt: skip
    cell = plan.cells("nad_pairs")[0]
    rule = plan.seed_rule("nad_pairs")
    job = plan.job(rule, {"arch": cell.arch, "variant": cell.variant})
    assert job == plan.train_job(cell.study, cell.arch, cell.variant, (0, 1, 2))
    s = cost.size(rule, job)
    assert (s.kind, s.reps) == ("train", 3 * TINY["nad_pairs"]["train"]["epochs"])
    shard = plan.job("nad_shard", {"arch": "mlp", "first": "0", "stop": "8"})
    assert cost.size("nad_shard", shard) == replace(cost.size("nads", plan.nad_job("mlp")), n=8)


def test_a_model_too_slow_to_measure_is_foreseen_from_a_few_samples(tmp_path, monkeypatch):
    # ResNet-18's evaluation at the paper's sizes (4 000 training and 10 000 test samples, one
    # thread) ran for minutes in a dry run before the probe called it too slow; a training of
    # it, 36 s. Here every model counts as slow, and the samples the probe ran are counted
    import pytest

    from nadpipe import models, probes

    monkeypatch.setattr(probes, "PROBE_SLOW", 1e-9)
    seen = []  # (training mode, samples) of each forward call
    build = models.build

    def counted(spec):
        net = build(spec)
        net.register_forward_pre_hook(lambda m, args: seen.append((m.training, len(args[0]))))
        return net

    monkeypatch.setattr(models, "build", counted)
    plan = _plan(tmp_path)
    cell = plan.cells("nad_pairs")[0]
    evaluation = plan.eval_job(cell.study, cell.arch, cell.variant, cell.seed)
    seen.clear()  # not the config's model check
    with pytest.raises(cost.ProbeTooSlow, match=r"about \d+ CPU-s here for \d+ training samples"):
        probes.probe(evaluation)
    conditions, splits = len(evaluation.conditions), 2
    assert 0 < sum(n for _, n in seen) <= probes.PROBE_FEW * conditions * splits, seen
    seen.clear()
    training = plan.train_job(cell.study, cell.arch, cell.variant, (cell.seed,))
    fixed, per = probes.probe(training)
    # all per sample, from a warm-up of 2 samples and then a few (the training set: 200)
    assert fixed == 0 and per > 0
    assert sum(n for training, n in seen if training) == 2 + probes.PROBE_FEW, seen


def test_the_time_is_the_cpu_at_the_cores_the_machines_load_leaves():
    # 10c1e0f: "about 3.9 min" for the default study, which took 67.7 min beside other work
    assert cost.share(2, (2, 0.0)) == 2.0  # idle: both cores
    assert cost.share(2, (16, 6.0)) == 2.0  # the load fits beside the run
    assert cost.share(2, (2, 6.0)) == 0.5  # 2 of 8 waiting processes: a quarter of the cores
    assert cost.share(8, (2, 0.0)) == 2.0  # no more than the machine has
    s = cost.Size("plot", None, "plot")
    jobs = [("plot", s, None)] * 80
    quiet = cost.estimate("results", jobs, 2, free=(2, 0.0))
    busy = cost.estimate("results", jobs, 2, free=(2, 6.0))
    said = r"about (.*?) on 2 cores at this machine's load now \(([\d.]+) on 2 cores: its jobs"
    q, b = re.search(said, quiet), re.search(said, busy)
    assert (q[2], b[2]) == ("0.0", "6.0") and "its jobs get about 0.5" in busy
    # 80 x (0.6 + 0.15) CPU-s of jobs and start-up, over the cores they get; the run's own
    # start-up and Snakemake's 0.2 s a job on top
    work, rest = 80 * (cost.LIGHT + cost.START_JOB), cost.START_RUN + 80 * cost.PER_JOB
    assert (q[1], b[1]) == (clock(work / 2 + rest), clock(work / 0.5 + rest))
    assert f"of CPU, {clock(cost.START_RUN + 80 * cost.START_JOB)} of it start-up" in quiet
