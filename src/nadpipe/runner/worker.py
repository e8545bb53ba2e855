"""A warm Python for the workflow's jobs on this machine.

Importing torch takes about 2 s; in a study of many small models that is about half of all job
time. A run that executes jobs therefore starts one server (Command.start, at Snakemake's onstart),
and each job script hands its call to it: the server forks a child per job (a copy of the warm
process, nothing shared at run time), which takes the script's working directory and
environment, runs the job under its log and returns the result. Before it forks the first job of
a function, the server imports that function's module and the modules the function names as
imported lazily (its `warm` attribute, see `warm`), so every later job of it starts with them
loaded, and a run imports only what its jobs use (a run that redraws a figure: no training
module, no torch).
A job that is not the local Snakemake run's own (a SLURM job, another Snakemake), or finds no
server, runs in its own process as before; the results are the same either way (tested).

Before each fork the server freezes its objects for the garbage collector (gc.freeze), so a
child's collections leave the inherited heap alone and do not copy it page by page.

The child ends itself when its script goes away (Snakemake killed the job), and the server ends
with the Snakemake process that started it. Nothing in the server runs torch, so no thread pool
exists when it forks.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from ..log import echoing, said
from ..usage import usage
from .slots import gpu_slot

# the science's table of jobs (nadpipe.jobtable.job): a job's name -> its function
Table = Callable[[str], Callable]

ENV = "NADPIPE_WORKER"  # "<socket path>:<pid of the Snakemake process that owns it>"


def _send(conn: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj)
    conn.sendall(struct.pack("!Q", len(data)) + data)


def _recv(conn: socket.socket) -> Any:
    head = _exactly(conn, 8)
    return pickle.loads(_exactly(conn, struct.unpack("!Q", head)[0]))


def _exactly(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


@contextlib.contextmanager
def job_log(
    path: str | os.PathLike | None,
    threads: int | None = None,
    gpu: int = 0,
    echo: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Send stdout and stderr to a job's log file; set torch's CPU threads; with `gpu` > 0 hold
    a GPU slot (nadpipe.runner.slots) for the job's lifetime. Long work's progress also goes
    to the run's console, a line a minute (nadpipe.log.echoing), each line as the console shows
    it: through `echo`, else to the stderr this process had before the log took it."""

    if threads:
        torch = sys.modules.get("torch")
        if torch is not None:  # a job forked from the warm server, or run in a test's process
            torch.set_num_threads(threads)
        else:
            # a job in a process of its own (SLURM, no server): torch reads these when the job
            # imports it, and a figure's or summary's job, which never does, is not made to
            # (torch's import: 1.4 CPU-s, far more from a cluster's network file system)
            os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    slot = gpu_slot() if gpu else contextlib.nullcontext()
    if path is None:
        with slot:
            yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    console = sys.stderr
    say = echo or (lambda line: print(line, file=console, flush=True))

    def to_console(line: str) -> None:
        say(f"nadpipe: {line} ({path})")

    with open(path, "w", buffering=1) as log, echoing(to_console), usage(path):
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                with slot:
                    yield
            except BaseException:
                traceback.print_exc(file=log)
                raise


def warm(target: str, table: Table) -> Callable:
    """Import the function of the job `target` (a name in `table`) and the modules it
    names in its `warm` attribute (those it imports only while it runs, e.g. torch._dynamo, which an
    optimizer's first step imports: 1.5 s; a tuple of names, or a function that returns them
    from the environment the server shares with the run): what the server does once, before it
    forks the first job of `target`. Returns the function."""
    fn = table(target)
    names = getattr(fn, "warm", ())
    for module in names() if callable(names) else names:
        importlib.import_module(module)
    return fn


def run_here(
    target: str,
    table: Table,
    args: tuple,
    kwargs: dict,
    log: str | None,
    threads: int,
    gpu: int,
    echo: Callable[[str], None] | None = None,
):
    """Run `table(target)(*args, **kwargs)` in this process, under the job's log."""
    with job_log(log, threads, gpu, echo):
        return table(target)(*args, **kwargs)


# -- the job script's side ------------------------------------------------------------------------


def _owned_by(pid: int) -> bool:
    """Whether this process descends from `pid` (the Snakemake run that owns the server)."""
    return any(p.pid == pid for p in psutil.Process().parents())


def _connect(path: str, wait: float = 30.0) -> socket.socket | None:
    """A connection to the server, waiting while it starts; None when there is none."""
    deadline = time.monotonic() + wait
    while True:
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(path)
            return conn
        except OSError:
            conn.close()
            starting = os.path.exists(path + ".starting")
            if not starting or time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def hand_over(
    target: str,
    table: Table,
    *args,
    log: str | None = None,
    threads: int = 1,
    gpu: int = 0,
    **kwargs,
):
    """Run the job `target` (a name in `table`, the science's table of jobs) with these
    arguments: in the local run's warm server when there is one, else in this process. Returns
    what the function returns; raises SystemExit(1) when it fails (its traceback is in the
    job's log)."""
    where = os.environ.get(ENV, "")
    path, _, owner = where.rpartition(":")
    conn = None
    if path and owner.isdigit() and "SLURM_JOB_ID" not in os.environ and _owned_by(int(owner)):
        conn = _connect(path)
    if conn is None:
        return run_here(target, table, args, kwargs, log, threads, gpu)
    with conn:
        request = dict(target=target, args=args, kwargs=kwargs, log=log, threads=threads, gpu=gpu)
        _send(conn, {**request, "cwd": os.getcwd(), "env": dict(os.environ), "path": sys.path})
        try:
            status, value = _recv(conn)
            while status == "progress":  # the job's progress, for the run's console
                print(value, file=sys.stderr, flush=True)
                status, value = _recv(conn)
        except ConnectionError:
            print(
                f"the job's process ended without a result (killed, or out of memory?); "
                f"its log: {log}",
                file=sys.stderr,
            )
            raise SystemExit(1) from None
    if status == "error":
        print(f"{value} (traceback in {log})", file=sys.stderr)
        raise SystemExit(1)
    return value


# -- the server's side -------------------------------------------------------------------------


def _child(conn: socket.socket, req: dict, table: Table) -> None:
    """Run the job `req` in this forked child; never returns."""
    code = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[:] = req["path"]

        def watch() -> None:  # the script went away (the job was killed): end too
            with contextlib.suppress(OSError):
                conn.recv(1)
            os.kill(os.getpid(), signal.SIGKILL)

        # the server's SIGTERM handler ends it by SystemExit(0); a job stopped so is killed,
        # which its script says as such, not as an error "SystemExit: 0"
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        threading.Thread(target=watch, daemon=True).start()
        try:

            def echo(line: str) -> None:
                _send(conn, ("progress", line))

            value = run_here(
                req["target"],
                table,
                req["args"],
                req["kwargs"],
                req["log"],
                req["threads"],
                req["gpu"],
                echo,
            )
            _send(conn, ("ok", value))
            code = 0
        except BaseException as e:  # noqa: BLE001 -- report any failure to the script
            _send(conn, ("error", said(e)))
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(code)


def _listen(path: str) -> socket.socket:
    """The server's socket at `path`, its run's source fixed first; the `.starting` mark the
    jobs wait on removed whether it came up or not."""
    try:
        # here, not at the top: every job script imports this module, and provenance
        # (with the settings it reads) costs each of them 0.05 s
        from ..provenance import source_hash

        source_hash()  # fixed now: the source of this run, whenever its modules are imported
        # torch comes with the first job module that imports it (`warm`): a run whose jobs
        # only draw figures or write tables never imports it (1.3 CPU-s)
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(64)
        return listener
    finally:  # up, or failed: either way the jobs stop waiting for it
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + ".starting")


def serve(path: str, owner: int, table: Table) -> None:
    """Fork a child per connection until the owner ends, each job's function (a name in
    `table`) imported here first (`warm`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is for the jobs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    warmed: set[str] = set()
    listener = _listen(path)
    try:
        while os.getppid() == owner:
            ready, _, _ = select.select([listener], [], [], 1.0)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            if not ready:
                continue
            conn, _ = listener.accept()
            try:
                conn.settimeout(30.0)  # a script sends its request as soon as it connects
                req = _recv(conn)
                conn.settimeout(None)
            except (OSError, EOFError, pickle.UnpicklingError):  # ConnectionError is an OSError
                conn.close()  # the script went away before it asked
                continue
            if req["target"] not in warmed:
                warmed.add(req["target"])
                # a failure is the job's to report: its child imports the module again
                with contextlib.suppress(Exception):
                    warm(req["target"], table)
            # the server's objects (torch's, the warmed modules') move out of the garbage
            # collector's reach: a child's full collection would otherwise traverse them all and
            # copy every page it touches (a LeNet NAD job and its figure, forked: 1.95 instead
            # of 2.22 CPU-seconds, medians of five; a bare full collection 0.03 instead of 0.45)
            gc.freeze()
            if os.fork() == 0:
                listener.close()
                _child(conn, req, table)
            conn.close()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


# the longest socket path every system takes (sun_path: 108 bytes on Linux, 104 on macOS, with
# its terminating NUL); a longer one fails to bind ("AF_UNIX path too long")
MAX_SOCKET_PATH = 100


def socket_path(directory: str) -> str:
    """Where the server of this process listens: in `directory` (the results folder's
    .nadpipe), or, where that path is too long for a socket (a results folder deep in the
    tree: every job of such a run started cold, 2 to 4 s each, with the server's failure in
    worker.log alone), in the temporary folder under a name made from it."""
    path = os.path.abspath(os.path.join(directory, f"worker-{os.getpid()}.sock"))
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"nadpipe-worker-{digest}.sock")


def start(main: str, directory: str = ".nadpipe") -> subprocess.Popen:
    """Start the server for this process's jobs and tell them where it is (the environment
    they inherit). `main`: the module whose `python -m` serves (`serve`) with its table of
    jobs (nadpipe.jobtable), so the runner names the science without importing it."""
    os.makedirs(directory, exist_ok=True)
    path = socket_path(directory)
    open(path + ".starting", "w").close()
    log = open(os.path.join(directory, "worker.log"), "w")  # noqa: SIM115
    # the folder in its command line too, wherever the socket is: runs.orphans finds a killed
    # run's server and its jobs by it
    folder = os.path.abspath(directory)
    proc = subprocess.Popen(
        [sys.executable, "-m", main, path, str(os.getpid()), folder],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    os.environ[ENV] = f"{path}:{os.getpid()}"
    return proc
