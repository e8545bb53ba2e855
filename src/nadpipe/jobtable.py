"""Every job the workflow hands the runner, by name: the one table of them.

A job script names its job (`worker.run("evaluate", ...)`); the runner (nadpipe.runner.worker)
looks the name up here, in the process that runs it. Each entry imports its function when it is
looked up, so that a job imports only what its own module needs: a figure's or a table's job
never imports torch (tests/test_device.py). A reader's "find usages" and the import graph see
every job through these imports. A new job is a function here and its name in JOBS.
"""

from __future__ import annotations

from collections.abc import Callable


def nads() -> Callable:
    from .jobs import nads_job

    return nads_job


def nad_shard() -> Callable:
    from .jobs import nad_shard_job

    return nad_shard_job


def nad_round() -> Callable:
    from .jobs import nad_round_job

    return nad_round_job


def train() -> Callable:
    from .jobs import train_job

    return train_job


def train_together() -> Callable:
    from .jobs import train_together_job

    return train_together_job


def evaluate() -> Callable:
    from .jobs import evaluate_job

    return evaluate_job


def aggregate() -> Callable:
    from .tables import aggregate_job

    return aggregate_job


def plot() -> Callable:
    from .plots import draw

    return draw


def plot_nads() -> Callable:
    from .plots import nad_figure_job

    return nad_figure_job


def signatures() -> Callable:
    from .signatures import signatures_job

    return signatures_job


def report_summary() -> Callable:
    from .report import summary_table_job

    return summary_table_job


def report_landing() -> Callable:
    from .report import landing_page

    return landing_page


def resolved_config() -> Callable:
    from .report import resolved_config_job

    return resolved_config_job


def process() -> Callable:
    from .runner.worker import process_facts

    return process_facts


JOBS: dict[str, Callable[[], Callable]] = {
    f.__name__: f
    for f in (
        nads, nad_shard, nad_round, train, train_together, evaluate, aggregate, plot, plot_nads,
        signatures, report_summary, report_landing, resolved_config, process,
    )
}  # fmt: skip


def job(name: str) -> Callable:
    """The function of the job `name`; an unknown name says the known ones."""
    loader = JOBS.get(name)
    if loader is None:
        raise KeyError(f"no job {name!r} in nadpipe.jobtable; its jobs: {', '.join(JOBS)}")
    return loader()
