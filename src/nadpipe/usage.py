"""What a process used, measured where the work ran: CPU-seconds, peak memory, the usage
table beside a job's log, and seconds as a reader takes them. A leaf: the runner, the jobs,
the cost and the convergence forecast all read it, and it imports nothing of nadpipe."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def usage(log: str | os.PathLike) -> Iterator[None]:
    """Write what the job used, measured in the process that did its work (the warm server's
    child, or the job's own process), beside its log: LOG.usage.tsv, with the columns of
    Snakemake's benchmark tables (s, cpu_time, max_rss in MB). The rules have no `benchmark:`:
    under the warm server Snakemake's table measured the script that handed the job over (a
    10-minute NAD job: cpu_time 0.11, max_rss 26), and a job Snakemake's output cache serves
    can have none."""
    start, cpu_before = time.perf_counter(), used()[0]
    try:
        yield
    finally:
        cpu, peak = used()
        table = usage_table(log)
        with contextlib.suppress(OSError):
            table.write_text(
                "s\tcpu_time\tmax_rss\n"
                f"{time.perf_counter() - start:.4f}\t{cpu - cpu_before:.4f}\t{peak:.2f}\n"
            )


def usage_table(log: str | os.PathLike) -> Path:
    """The usage table beside a job's log (`usage`): LOG.usage.tsv."""
    return Path(str(log).removesuffix(".log") + ".usage.tsv")


def used() -> tuple[float, float]:
    """This process's CPU-seconds so far (every thread, user and system) and its peak resident
    memory in MiB: a warm server's child counts from its fork, its memory from the server's."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024


def spent(work) -> float:
    """The CPU-seconds this process spends on `work()`."""
    before = used()[0]
    work()
    return used()[0] - before


def process_facts() -> tuple[int, int, bool]:
    """The process a job runs in: its pid, the objects it inherited frozen for the garbage
    collector (the warm server's, when a child of it), whether torch is loaded. A job of its
    own ("process", nadpipe.jobtable): what checks that the warm server serves the jobs."""
    return os.getpid(), gc.get_freeze_count(), "torch" in sys.modules


def clock(seconds: float) -> str:
    """Seconds as a reader takes them: 45 s, 3.2 min, 1.4 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
