"""Snakemake's command, started as a fork of a Python that already imported it.

A new `snakemake` process spends about 1 CPU-second on imports before it reads the Snakefile
(the SLURM plugin's pandas alone 0.35 s), 2.7 when it imports torch (a study module, a user's
model checked), and the suite starts about a hundred. This process imports them once (torch
too: it starts no thread on import; not nadpipe, which the run imports after its environment
is set) and forks a child per command. The child takes the command's environment, working
directory, umask, argv and output files, runs `snakemake.cli.main` as the `snakemake` script
does, and exits through the interpreter's own shutdown, atexit hooks included.
tests/helpers.run_snakemake decides which commands come here: those that name this venv's
Snakemake by its path (commands typed as printed too), not those run in another Python
environment.

Protocol: one JSON request per line on stdin ({argv, cwd, env, umask, stdout, stderr}, the
last two paths); one line back per request, the command's exit status.
"""

import importlib
import json
import os
import pkgutil
import random
import sys
from pathlib import Path

# what a run's Snakemake process imports, nadpipe aside: Snakemake before it reads the Snakefile,
# torch where a study module or a model check needs it
PRELOAD = ("snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag",
           "snakemake.scheduling.job_scheduler", "snakemake.script", "jsonschema",
           "yaml", "torch")  # fmt: skip
PLUGINS = "snakemake_"  # the plugins, as Snakemake's registries import them, and their interfaces


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    for info in pkgutil.iter_modules():
        if info.ispkg and info.name.startswith(PLUGINS):
            importlib.import_module(info.name)


def serve() -> dict:
    """Answer requests until stdin closes; returns only in a forked child, with its request."""
    reply = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            reply.close()
            return request
        _, status = os.waitpid(pid, 0)
        reply.write(f"{os.waitstatus_to_exitcode(status)}\n")
        reply.flush()
    sys.exit(0)


def become(request: dict) -> None:
    """This child as a new process of the request's command would start."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    os.chdir(request["cwd"])
    if request["umask"] >= 0:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(sys.argv[0])  # as for the script: its folder, not tests/
    random.seed()
    # what Snakemake takes from the working directory when it is imported (the run's header)
    from snakemake.workflow import Workflow

    Workflow._rundir = str(Path.cwd().absolute())


if __name__ == "__main__":
    preload()
    sys.stdout.flush()
    become(serve())
    from snakemake.cli import main

    sys.exit(main())
