"""What a job costs here, measured before a run: a model the dry run has no record of, timed
now at small sizes through the code its job runs (nadpipe.cost prices with it)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from . import models
from .backend import on_cpu
from .cost import Job, ProbeTooSlow
from .evaluate import evaluate_conditions
from .grid import NadJob, NadShardJob, TrainJob
from .jobs import measures_of
from .nads import as_network, sample_sensitivities
from .studies import REGISTRY
from .train import train
from .usage import spent


def probe(job: Job) -> tuple[float, float]:
    """A job's CPU-seconds on this machine's CPU, measured now at small sizes of it: the fixed
    part and the part per unit of one repetition (nadpipe.cost.Size: a training's epoch per
    sample, an evaluation per training sample, NADs per network), through the code the job
    runs (the training loop, the evaluation's conditions and measures, the NAD estimator) on
    one thread, with the identity basis for NADs where a study needs them. A model that is
    slow here is measured at one size only (PROBE_SLOW), and its evaluation's measures not at
    all (ProbeTooSlow): a dry run stays short."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with on_cpu():
            return _probe(job)
    finally:
        torch.set_num_threads(threads)


# CPU-seconds of a probe's first size above which it measures no second one
PROBE_SLOW = 2.0
# samples a training or an evaluation is first timed on, to foresee its first size: ResNet-18's
# evaluation at the paper's sizes (4 000 + 10 000 samples) took a dry run past 4 minutes
PROBE_FEW = 16


def _line(at, small: int, large: int) -> tuple[float, float]:
    """(fixed, per unit) through the CPU-seconds `at` two sizes; at the small one alone, all
    per unit, where that took PROBE_SLOW or more."""
    low = at(small)
    if low >= PROBE_SLOW or large <= small:
        return 0.0, low / small
    high = at(large)
    per = max(high - low, 0.0) / (large - small)
    return max(low - per * small, 0.0), per


def _eigh_seconds(d: int) -> float:
    """The CPU-seconds of the NADs' eigendecomposition of a d x d covariance here, from one of
    256 x 256 scaled as d³ (that of 3 072 takes 10 s on one thread: not measured whole)."""
    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    spd = a @ a.T
    return spent(lambda: torch.linalg.eigh(spd)) * (d / 256) ** 3


def _probe(job: Job) -> tuple[float, float]:
    if isinstance(job, NadShardJob):
        job = job.nads
    if isinstance(job, NadJob):
        build = as_network(partial(models.build, job.model), job.model.shape, job.settings)

        def nads_at(n: int) -> float:
            settings = replace(job.settings, n_networks=n, networks_per_chunk=n)
            shape = job.model.shape
            return spent(lambda: sample_sensitivities(build, settings, shape, "cpu", False))

        fixed, per = _line(nads_at, 1, 3)
        return fixed + _eigh_seconds(job.model.shape.d), per
    training = isinstance(job, TrainJob)
    data = job.data[0] if training else job.data
    vectors = torch.eye(data.shape.d) if job.nads is not None else None
    if "n_train" not in dict(data.settings):
        raise ProbeTooSlow(
            "its data come from CIFAR-10's files, which a dry run does not read; its first "
            "run's record prices it"
        )
    n = int(data.get("n_train"))

    def built(m: int):
        sized = replace(data, settings=tuple((k, m if k == "n_train" else v) for k, v in
                                             data.settings))  # fmt: skip
        return sized, REGISTRY[job.study].build(sized, vectors)

    if training:
        once = replace(job.train, epochs=1)

        def train_at(m: int) -> float:
            _, splits = built(m)
            x, y = splits["train"]
            net = models.build(job.model)
            return spent(lambda: train([net], x[None], y[None], once, [0], None, None, False))

        batch = job.train.batch_size
        small = min(2 * batch, n // 2 or 1)
        few = min(PROBE_FEW, small)
        train_at(2)  # once unmeasured: an optimizer's first step imports torch._dynamo (1 s)
        at_few = train_at(few)
        if at_few * small / few >= PROBE_SLOW:  # a model slow here: its few samples say it
            return 0.0, at_few / few
        return _line(train_at, small, min(4 * batch, n))
    # an evaluation: its conditions scale with the training set, its measures do not
    m = min(2 * job.batch_size, n)
    sized, splits = built(m)
    net = models.build(job.model).eval()
    conditions = dict(job.conditions)
    few = {split: (x[:PROBE_FEW], y[:PROBE_FEW]) for split, (x, y) in splits.items()}
    foreseen = spent(lambda: evaluate_conditions(net, few, job.batch_size, conditions))
    foreseen *= sum(len(y) for _, y in splits.values()) / sum(len(y) for _, y in few.values())
    whole = (
        foreseen
        if foreseen >= PROBE_SLOW
        else spent(lambda: evaluate_conditions(net, splits, job.batch_size, conditions))
    )
    if whole >= PROBE_SLOW:
        raise ProbeTooSlow(
            f"its model takes about {whole:.0f} CPU-s here for {m} training samples and the test "
            "set, too long to measure "
            "an evaluation in a dry run; its first evaluation's record prices it"
        )
    measures = spent(lambda: measures_of(replace(job, data=sized), net, splits, vectors))
    return measures, whole / m
