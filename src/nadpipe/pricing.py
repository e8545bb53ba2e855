"""The dry-run price of a plan's jobs: the workflow hands a `Pricer` to the runner
(nadpipe.runner.command.Command), which asks it at the end of a dry run and after a run, and imports
nothing of the science itself. The plan gives each job's typed job (grid.Plan.job), nadpipe.cost
prices it, and a model this machine has no record of is measured now (nadpipe.probes)."""

from __future__ import annotations

from . import cost
from .grid import Plan


def _probe(job: cost.Job) -> tuple[float, float]:
    # here, not at the top: probes imports torch (1.4 CPU-s), which parsing the workflow for a
    # run, --lint or --report does not need; only a dry run that measures a model pays it
    from .probes import probe

    return probe(job)


class Pricer:
    """Prices the jobs of `plan` on this machine."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def size(self, rule: str, wildcards: dict) -> tuple[cost.Size, cost.Job | None]:
        """A job's size (nadpipe.cost.size; a NAD job that puts shards together merges) and
        its typed job, made once."""
        job = self.plan.job(rule, wildcards)
        arch = wildcards.get("arch")
        merges = rule == "nads" and arch is not None and bool(self.plan.nad_shards(arch))
        return cost.size(rule, job, merges), job

    def line(self, jobs: list[tuple[str, dict]], cores: int, elsewhere: bool) -> str:
        """What a dry run's `jobs` (rule, wildcards) cost on this machine's `cores`
        (`elsewhere`: they compute on a GPU or a cluster): the line it ends with
        (nadpipe.cost.estimate)."""
        sized = [(rule, *self.size(rule, w)) for rule, w in jobs]
        later = any(rule == "nad_round" for rule, _ in jobs)
        measure = _probe if cost.probing() else None
        return cost.estimate(self.plan.root, sized, cores, measure, elsewhere, later)

    def record(self, done: list[tuple[str, dict, str | None]]) -> None:
        """Record what the jobs a run finished cost (nadpipe.cost.record), for later
        estimates: (rule, wildcards, log)."""
        sized = [(self.size(rule, w)[0], log) for rule, w, log in done if log]
        cost.record(self.plan.root, sized)
