"""Shared test fixtures; everything is CPU-sized and seeded."""

import contextlib
import os
import tempfile
from pathlib import Path

# Two test processes share two cores and start Snakemake runs whose jobs run torch's threads
# too: more threads than cores. nadpipe sets how torch's threads wait when it is imported, before
# torch (nadpipe.threads); the test process imports it first for the same reason, and every
# process the tests start imports nadpipe before torch.
import nadpipe  # noqa: F401

# isort: split
import matplotlib
import pytest
import torch

# the stand-in accelerator: its import registers it, before any test's first backward pass
# (where there is no CUDA: tests/standin.py says why)
from standin import standin  # noqa: E402

from nadpipe.backend import keep_freed_memory  # noqa: E402

matplotlib.use("Agg")
torch.set_num_threads(2)
# the test processes compute as jobs do: with the memory settings every job's setup makes
keep_freed_memory()
# the model checks that passed (nadpipe.verdicts): this session's own, shared by its processes
# (pytest-xdist gives them one run id), never the user's cache
os.environ["NADPIPE_CACHE"] = os.path.join(
    tempfile.gettempdir(), f"nadpipe-tests-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"
)

# a dry run's cost from records alone: its probes would measure each test config's models,
# a minute over the suite; tests/test_cost.py and the search's dry run measure them
os.environ["NADPIPE_DRY_RUN_COST"] = "records"

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"

# the files longest first (worker-seconds in a full run, 0.10.4: test_workflow 357, test_cifar
# 95, ... test_lint 8), the rest after them: pytest-xdist hands them out in this order
# (--no-loadscope-reorder; by default it orders them by their number of tests), so the two test
# processes end together, on short files (loadfile keeps each file in one process); the SLURM
# test last, as it reads a run the session started in the background when it began
# (slurm_smoke.py)
LONGEST_FIRST = (
    "test_workflow.py", "test_cifar.py", "test_search.py", "test_readme.py", "test_batch_runs.py",
    "test_floor.py", "test_resume.py", "test_shards.py", "test_cli.py", "test_nads.py",
    "test_acceptance.py", "test_studies.py", "test_faults.py", "test_side_by_side.py",
    "test_models.py", "test_standin.py", "test_protocols.py", "test_plots.py", "test_device.py",
    "test_config.py", "test_docs.py", "test_train.py", "test_lint.py",
)  # fmt: skip
LAST = ("test_slurm.py",)


# the tests that need Debian packages a bare machine lacks (tests/system_packages.py), and the
# session's background install of them
NEED_PACKAGES = ("test_slurm.py", "test_workflow.py", "test_docs.py")
APT = pytest.StashKey["subprocess.Popen | None"]()
SMOKE = pytest.StashKey[tuple]()


def pytest_configure(config):
    """In the process that starts the test processes (before it starts them): install the Debian
    packages the asked tests need in the background, when this
    machine lacks them; start the SLURM smoke run in the background when the SLURM test is asked
    for unfiltered."""
    if hasattr(config, "workerinput"):
        return
    tests = Path(__file__).parent
    asked = [(config.invocation_params.dir / a.split("::")[0]).resolve() for a in config.args]
    if any(tests.is_relative_to(a) or a.name in NEED_PACKAGES for a in asked):
        from system_packages import start_background_install

        config.stash[APT] = start_background_install(Path(tempfile.gettempdir()))
    unfiltered = not (config.option.keyword or config.option.markexpr)
    if unfiltered and any(tests.is_relative_to(a) or a.name in LAST for a in asked):
        import slurm_smoke

        folder = Path(tempfile.mkdtemp(prefix="nadpipe-slurm-smoke-"))
        config.stash[SMOKE] = (slurm_smoke.start(folder), folder)
        os.environ[slurm_smoke.ENV] = str(folder)  # for the test processes, started after this


def pytest_unconfigure(config):
    """A SLURM smoke run still going when the session ends is stopped, with its cluster."""
    if SMOKE in config.stash:
        import slurm_smoke

        slurm_smoke.stop(*config.stash[SMOKE])


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        if name in LAST:
            return len(LONGEST_FIRST) + 1 + LAST.index(name)
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(
            reason="needs CUDA, which this machine lacks (CI has none): run "
            "`.venv/bin/python -m pytest -m gpu` on a GPU machine (docs/speed.md)"
        )
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def unit_vector():
    v = torch.randn(1024, generator=torch.Generator().manual_seed(3))
    return v / v.norm()


@pytest.fixture(scope="module")
def micro_plan(tmp_path_factory):
    """The plan of the micro study (nadpipe.acceptance: one cell of every study) on
    CIFAR-10-like files (the session's one copy: `shared`)."""
    from nadpipe import cifar
    from nadpipe import config as nc
    from nadpipe.acceptance import micro_config
    from nadpipe.grid import Plan

    with shared(tmp_path_factory, "micro-cifar") as (root, made):
        if not made:
            cifar.write_cifar10_like(str(root), n_train=96, n_test=48, seed=2)
    cfg, _ = nc.load_config(micro_config(str(root)), SCHEMA)
    return Plan(cfg)


@pytest.fixture(scope="module")
def micro_on_cpu(micro_plan, tmp_path_factory):
    """What every job of the micro study writes on the CPU (test_device.run_every_job),
    computed once in the session (`shared`): test_device and test_standin compare with it."""
    import pickle

    from helpers import run_every_job

    from nadpipe.backend import Backend

    with shared(tmp_path_factory, "micro-on-cpu") as (folder, made):
        if not made:
            found = run_every_job(micro_plan, folder, Backend(device="cpu"))
            (folder / "found.pkl").write_bytes(pickle.dumps(found))
        return pickle.loads((folder / "found.pkl").read_bytes())


@contextlib.contextmanager
def shared(tmp_path_factory, name: str):
    """A folder of this session's, the same for its test processes (pytest-xdist's shared
    temporary folder), and whether it was made before: the first process to ask makes it while
    the others wait on its lock (fcntl), then all read it."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's, above each process's own
    folder, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = done.exists()
        folder.mkdir(exist_ok=True)
        yield folder, made
        done.touch()


@pytest.fixture
def train_here(monkeypatch, caplog):
    """Train a job to its end in this process (helpers.kill_mid_epoch kills its twin in a
    process of its own), on one thread, in `cwd`, with its backend in the environment as a job
    gets it; returns what it said."""
    import logging
    from contextlib import nullcontext

    from nadpipe.io import RUN_ENV as ENV
    from nadpipe.jobs import train_job

    def train(job, outs, cwd, backend=None, call=None) -> str:
        """`call`: (a function of nadpipe.jobs, its arguments) instead of train_job."""
        from nadpipe import jobs

        monkeypatch.chdir(cwd)
        if backend is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, backend.to_env())
        threads = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
        torch.set_num_threads(1)
        caplog.clear()
        caplog.set_level(logging.INFO, logger="nadpipe")
        try:
            on_standin = backend is not None and backend.device == "standin"
            with standin() if on_standin else nullcontext():
                if call is None:
                    train_job(job, None, *outs)
                else:
                    getattr(jobs, call[0])(*call[1])
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)  # as the rest of the suite has it
        return caplog.text

    return train
