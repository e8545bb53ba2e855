"""What nadpipe says: timestamped lines with their level on stderr (the library writes nothing
to stdout; a job's stderr is its log file), and progress for long work."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator

WARNING = "WARNING:"  # the mark the end-of-run summary collects from job logs
LOG = logging.getLogger("nadpipe")


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record is emitted: a job's log file while
    `runner.worker.job_log` holds it, the terminal otherwise."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _logger() -> logging.Logger:
    """nadpipe's logger: timestamped lines with their level on stderr (the library writes
    nothing to stdout), unless the program has set up logging itself."""
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = _CurrentStderr()
        fmt = "%(asctime)s %(levelname)s: %(message)s"
        handler.setFormatter(logging.Formatter(fmt, "%Y-%m-%d %H:%M:%S"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
        LOG.propagate = False
    return LOG


def set_verbosity(level: int) -> None:
    """-1: warnings and errors only (no progress), 0: info (the default), 1: debug too."""
    _logger().setLevel({-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}[level])


def debug(message: str) -> None:
    """A line shown only at -v (nadpipe's logger at DEBUG)."""
    _logger().debug(message)


def say(message: str) -> None:
    """One timestamped line on stderr (a log file gets one line per event, no progress
    frames); a message that starts with the warning mark (a job's summary that is a warning) is
    said as the warning it is, not as "INFO: WARNING:"."""
    if message.startswith(f"{WARNING} "):
        _logger().warning(message[len(WARNING) + 1 :])
    else:
        _logger().info(message)


def warn(message: str) -> None:
    """A warning (in a job's log: the run repeats it in its summary at the end)."""
    _logger().warning(message)


# where a running job's progress also goes, at a calm rate: the run's console (set by the
# job's runner, nadpipe.runner.worker.job_log, for the job's lifetime); None outside a job
_ECHO: Callable[[str], None] | None = None
ECHO_EVERY = 60.0  # seconds between two progress lines of one job on the console


@contextlib.contextmanager
def echoing(echo: Callable[[str], None]) -> Iterator[None]:
    """While it lasts, long work also says its progress through `echo`, at most every
    ECHO_EVERY seconds (NADPIPE_PROGRESS_EVERY overrides it) and not in its first ones: a
    job of a minute says nothing there, one of half an hour a line a minute."""
    global _ECHO
    before, _ECHO = _ECHO, echo
    try:
        yield
    finally:
        _ECHO = before


class _Lines:
    """Progress as plain timestamped lines at most every `every` seconds (and at the end)."""

    def __init__(self, total: int, desc: str, unit: str, every: float = 10.0):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.n, self.start, self.last = 0, time.perf_counter(), time.perf_counter()
        self.echoed = self.start
        self.echo_every = float(os.environ.get("NADPIPE_PROGRESS_EVERY", ECHO_EVERY))

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.perf_counter()
        spent = now - self.start
        left = spent / self.n * (self.total - self.n) if self.n else float("nan")
        line = (
            f"{self.desc}: {self.n}/{self.total} {self.unit} "
            f"({100 * self.n / max(self.total, 1):.0f} %), {spent:.1f} s, ~{left:.0f} s left"
        )
        if now - self.last >= self.every or self.n >= self.total:
            self.last = now
            say(line)
        if _ECHO is not None and now - self.echoed >= self.echo_every and self.n < self.total:
            self.echoed = now
            _ECHO(line)

    def close(self) -> None:
        pass


class _Silent:
    def update(self, k: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, unit: str = "it", enabled: bool = True):
    """A tqdm bar on a terminal; plain timestamped lines when stderr is a file (a job log)."""
    if not enabled or not _logger().isEnabledFor(logging.INFO):  # off, or -q
        return _Silent()
    if sys.stderr.isatty():
        # deferred: it loads tqdm, which importing log does not
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr)
    return _Lines(total, desc, unit)


def fold(warnings: list[str]) -> list[str]:
    """Warnings that say the same of other jobs (the same words but for their numbers and
    their log) as one line, the first of them, with how many more: so that a kind repeated
    over a grid's cells leaves the others in view."""
    groups: dict[str, list[str]] = {}
    for w in warnings:
        words = re.sub(r"\([^()]*\)$", "", w)  # its log
        groups.setdefault(re.sub(r"\d+(\.\d+)?", "#", words).strip(), []).append(w)
    return [
        ws[0] if len(ws) == 1 else f"{ws[0]}; and {len(ws) - 1} more like it"
        for ws in groups.values()
    ]


def said(e: BaseException) -> str:
    """A failed job's exception in one line, by its root cause: an OSError with an errno
    anywhere in the chain first (a full disk reaches torch.save as "No space left on device",
    and leaves it as "[enforce fail at inline_container.cc] unexpected pos"), then the last."""
    if isinstance(e, SystemExit | KeyboardInterrupt):
        return f"the job was stopped ({type(e).__name__} {getattr(e, 'code', '')})".strip()
    line, x, seen = f"{type(e).__name__}: {e}", e, set()
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno:
            name = errno.errorcode.get(x.errno, str(x.errno))
            where = f": {x.filename}" if x.filename else ""
            cause = f"{x.strerror or x} ({name}{where})"
            return cause if x is e else f"{cause}, which ended the job as {line}"
        x = x.__cause__ or x.__context__
    return line
