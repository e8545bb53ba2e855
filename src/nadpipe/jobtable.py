"""Every job the workflow hands the runner, by name: the one table of them.

A job script names its job (`run_job("evaluate", ...)`); the runner (nadpipe.runner.worker)
is handed this table's `job` and looks the name up in the process that runs it, so the runner
never imports the science. The warm server is this module run as a program (`start_server`).
Each entry imports its function when it is looked up, so that a job imports only what its own
module needs: a figure's or a table's job never imports torch (tests/test_device.py). A reader's
"find usages" and the import graph see every job through these imports. A new job is a function
here and its name in JOBS.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from .runner import worker
from .usage import process_facts

# Each loader imports its job's module when called, not at the top: a figure's job must not
# import torch through the training jobs' module (tests/test_device.py).


def nads() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import nads_job

    return nads_job


def nad_shard() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import nad_shard_job

    return nad_shard_job


def nad_round() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import nad_round_job

    return nad_round_job


def train() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import train_job

    return train_job


def train_together() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import train_together_job

    return train_together_job


def evaluate() -> Callable:
    # deferred: it loads torch, which importing jobtable does not
    from .jobs import evaluate_job

    return evaluate_job


def aggregate() -> Callable:
    # deferred: it loads pandas, which importing jobtable does not
    from .tables import aggregate_job

    return aggregate_job


def plot() -> Callable:
    # deferred: it loads matplotlib, which importing jobtable does not
    from .plots import draw

    return draw


def plot_nads() -> Callable:
    # deferred: it loads matplotlib, which importing jobtable does not
    from .plots_nads import nad_figure_job

    return nad_figure_job


def signatures() -> Callable:
    # deferred: it loads pandas, which importing jobtable does not
    from .signatures import signatures_job

    return signatures_job


def report_summary() -> Callable:
    # deferred: it loads pandas, which importing jobtable does not
    from .report import summary_table_job

    return summary_table_job


def report_landing() -> Callable:
    # deferred: it loads pandas, which importing jobtable does not
    from .report import landing_page

    return landing_page


def resolved_config() -> Callable:
    # deferred: it loads pandas, which importing jobtable does not
    from .report import resolved_config_job

    return resolved_config_job


def process() -> Callable:
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


def run_job(name: str, *args, **kwargs):
    """Run the job `name` from a job script: in the local run's warm server when there is one,
    else in this process (nadpipe.runner.worker.hand_over: `log`, `threads`, `gpu`)."""
    return worker.hand_over(name, job, *args, **kwargs)


def start_server(directory: str) -> subprocess.Popen:
    """Start the warm job server of this process's jobs: this module as a program."""
    return worker.start(__name__, directory)


if __name__ == "__main__":
    # argv: the socket, the pid of the Snakemake run that owns the server, the results folder
    # (in the command line for runs.orphans, which finds a killed run's server by it)
    worker.serve(sys.argv[1], int(sys.argv[2]), job)
