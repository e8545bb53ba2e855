"""What a run costs, before it runs: a dry run's jobs priced in CPU-seconds on this machine.

Each job of the workflow has a size (`size`): its kind, its architecture, a key of everything
that sets its cost but the numbers it scales with, and those numbers: `reps` times a count `n`
(a training: seeds x epochs repetitions of an epoch over n_train samples; an evaluation: one
pass over n_train; NADs: n networks). A price comes, in this order, from:
1. "records": this machine's earlier runs of jobs of the same key (`record` writes them at the
   end of every run that executed jobs, into results/.nadpipe/costs.jsonl; a dry run reads its
   own results folder's and those of the folders beside it);
2. "scaled": this machine's records of the same kind and architecture at another size,
   scaled by reps x n;
3. "measured": a probe of the model on this machine now (nadpipe.pricing.probe: the real
   training loop, evaluation and NAD estimator at small sizes), kept in nadpipe's cache
   (nadpipe.io.cache) so that it is measured once;
4. a job that draws a figure or writes a table: its own records, else LIGHT.
The wall time is the CPU-seconds over the cores, plus what Snakemake spends per job. Torch-free
but for the probe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from .grid import EvalJob, NadJob, NadShardJob, TrainJob
from .io import cache, save_text
from .log import warn
from .paths import COSTS, at
from .settings import plain
from .threads import cores_here
from .usage import clock, usage_table

Job = NadJob | NadShardJob | TrainJob | EvalJob

# CPU-seconds of a job that draws a figure, writes a table or a report page, where no record
# says (the default study's 14 such jobs: 0.08 to 0.98, median 0.58; 2 cores of an AMD EPYC)
LIGHT = 0.6
# wall seconds a run spends per job beside the jobs' own work: Snakemake's scheduling and the
# job script's start (the default study: 3:05 for 180 jobs whose CPU-seconds over 2 cores
# give 2:37, 0.15 s a job)
PER_JOB = 0.2
# CPU-seconds a run pays besides its jobs' own work (measured on 2 cores of an AMD EPYC, the
# micro study and the default study, every process of the run counted): Snakemake parsing the
# workflow and building its DAG with nadpipe's checks, and the warm server importing torch
# (START_RUN); each job's script, its hand-off and Snakemake's own work for it (START_JOB)
START_RUN = 5.0
START_JOB = 0.15
# jobs that only touch a file (a cell's empty ahead file, nadpipe.batching): their cost is
# Snakemake's own, in PER_JOB
EMPTY = {"trains_alone"}


@dataclass(frozen=True)
class Size:
    """A job's size: its `kind` (a rule's name where no probe prices it), `arch` (None for a
    job of no architecture), `key` (what sets its cost besides reps and n), `reps` x `n`."""

    kind: str
    arch: str | None
    key: str
    reps: float = 1.0
    n: float = 1.0

    @property
    def units(self) -> float:
        return self.reps * self.n


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _settings(data: dict) -> dict:
    return dict(data.get("settings") or ())


def _nads_size(rule: str, job: NadJob, networks: int) -> Size:
    if not networks:  # until converged: the rounds' shards compute, this job merges
        return Size(rule, None, rule)
    model, settings = plain(job.model), plain(job.settings)
    settings = {k: v for k, v in settings.items() if k != "n_networks"}
    return Size("nads", job.arch, _digest(["nads", model, settings]), 1, networks)


def size(rule: str, job: Job | None, merges: bool = False) -> Size:
    """The size of a job of `rule` whose typed job (nadpipe.grid) is `job` (None: a job
    without one, which draws a figure or writes a table). `merges`: a NAD job that only puts
    its shards together."""
    if isinstance(job, NadShardJob):
        return _nads_size(rule, job.nads, job.stop - job.first)
    if isinstance(job, NadJob):
        if merges or job.file:
            return Size(rule, None, rule)
        return _nads_size(rule, job, job.settings.n_networks)
    if not isinstance(job, TrainJob | EvalJob):
        return Size(rule, None, rule)
    spec = plain(job)
    data = spec["data"][0] if isinstance(job, TrainJob) else spec["data"]
    shape = data["shape"]
    fixed = {k: v for k, v in _settings(data).items() if k != "n_train"}
    n_train = _settings(data).get("n_train") or 1
    if isinstance(job, TrainJob):
        # what a data setting's value is (eps, sigma) costs nothing; the test set is
        # evaluated every epoch
        train = {k: v for k, v in spec["train"].items() if k != "epochs"}
        key = _digest(["train", spec["model"], train, shape, fixed.get("n_test"), spec["study"]])
        reps = len(spec["seeds"]) * spec["train"]["epochs"]
        return Size("train", spec["arch"], key, reps, n_train)
    key = _digest(
        ["evaluate", spec["model"], spec["analysis"], spec["measures"], spec["conditions"],
         spec["batch_size"], shape, fixed, spec["study"]]
    )  # fmt: skip
    return Size("evaluate", spec["arch"], key, 1, n_train)


def host() -> str:
    """This machine, as the records name it: its name and its CPU count."""
    return f"{platform.node()}/{os.cpu_count()}"


def record(results: str, done: list[tuple[Size, str]]) -> None:
    """Append to results/.nadpipe/costs.jsonl the CPU-seconds of each job a run executed: its
    size and its log (the usage table beside it, nadpipe.usage.usage)."""
    lines = []
    for s, log in done:
        try:
            wall, cpu, _ = usage_table(log).read_text().splitlines()[1].split("\t")
        except (OSError, IndexError, ValueError):
            continue  # a job that wrote no usage (Snakemake's own, or killed)
        row = {**s.__dict__, "units": s.units, "cpu": float(cpu), "wall": float(wall)}
        row["host"] = host()
        lines.append(json.dumps({**row, "when": time.time()}, sort_keys=True))
    if not lines:
        return
    path = at(COSTS, results)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")


def _number(row: dict, key: str, least: float = 0.0) -> bool:
    v = row.get(key)
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and (v >= least)
    )


def _record_ok(row) -> bool:
    """A cost record as `record` writes it: its size's fields, CPU-seconds 0 or more."""
    return (
        isinstance(row, dict)
        and all(isinstance(row.get(k), str) for k in ("kind", "key", "host"))
        and (row.get("arch") is None or isinstance(row["arch"], str))
        and _number(row, "cpu")
        and _number(row, "units", 1e-9)
    )


def _probe_ok(row) -> bool:
    """A kept probe as `_keep_probe` writes it: a size's key, fixed and per-unit CPU-seconds
    0 or more."""
    return (
        isinstance(row, dict)
        and isinstance(row.get("key"), str)
        and isinstance(row.get("host"), str)
        and _number(row, "fixed")
        and _number(row, "per")
    )


def _lines(path: Path, ok) -> tuple[list[dict], list[int]]:
    """The rows of a JSON-lines file that `ok` takes, and the numbers of the lines it does not
    (text that is no JSON, a row of other fields, a negative or infinite figure)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return [], []
    rows, bad = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        (rows.append(row) if ok(row) else bad.append(n))
    return rows, bad


def _dropped(path: Path, bad: list[int], what: str) -> None:
    if bad:
        lines = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warn(f"{path}: line(s) {lines} are no {what} nadpipe wrote (not JSON, other fields, or "
             "a negative or infinite figure): left out")  # fmt: skip


def records_of(folder: str | os.PathLike) -> list[dict]:
    """The cost records of one results folder, every machine's; a line that is no record is
    said and left out."""
    path = Path(at(COSTS, str(folder)))
    rows, bad = _lines(path, _record_ok)
    _dropped(path, bad, "cost record")
    return rows


def records(results: str) -> list[dict]:
    """This machine's records: of the results folder `results` and of the folders beside it."""
    here = Path(results).resolve()
    beside = here.parent.iterdir() if here.parent.is_dir() else []
    folders = [here, *(p for p in beside if p.is_dir() and p != here)]
    return [r for folder in folders for r in records_of(folder) if r["host"] == host()]


def _cache() -> Path:
    return cache() / "probes.jsonl"


def _probed() -> dict[str, dict]:
    """This machine's kept probes by key. A line that is no probe is said and removed from the
    cache: its size is measured again."""
    path = _cache()
    rows, bad = _lines(path, _probe_ok)
    if bad:
        _dropped(path, bad, "probe")
        with contextlib.suppress(OSError):  # no cache to mend: it is read as it is next time
            save_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), path)
    return {r["key"]: r for r in rows if r["host"] == host()}


def _keep_probe(row: dict) -> None:
    path = _cache()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps({**row, "host": host()}, sort_keys=True) + "\n")
    except OSError:
        pass  # no cache: measured again next time


class ProbeTooSlow(RuntimeError):
    """A probe that would take too long for a dry run, or that needs what a dry run does not
    read (nadpipe.pricing.probe raises it; its message says why the job is not priced)."""


@dataclass
class Price:
    """A job's CPU-seconds and where they come from ("records", "scaled", "measured",
    "light"; "none" when nothing could price it, with `why`)."""

    cpu: float
    source: str
    why: str = ""


def price(s: Size, past: list[dict], probes: dict, probe=None) -> Price:
    """A job's CPU-seconds (see the module's docstring for the order of the sources); `probe`
    measures a size's (fixed, per unit) CPU-seconds now (nadpipe.pricing.probe)."""
    same = [r["cpu"] / max(r["units"], 1e-9) for r in past if r["key"] == s.key]
    if same:
        return Price(statistics.median(same) * s.units, "records")
    if s.kind in EMPTY:
        return Price(0.0, "light")
    if s.arch is None:
        return Price(LIGHT, "light")
    alike = [
        r["cpu"] / max(r["units"], 1e-9)
        for r in past
        if r["kind"] == s.kind and r["arch"] == s.arch
    ]
    if alike:
        return Price(statistics.median(alike) * s.units, "scaled")
    if s.key not in probes and probe is not None:
        try:
            fixed, per = probe()
        except Exception as e:  # noqa: BLE001 -- a probe that cannot run prices nothing
            said = str(e) if isinstance(e, ProbeTooSlow) else f"{type(e).__name__}: {e}"
            said = said.rstrip(": ") or type(e).__name__  # never an empty reason
            # kept for this dry run, not in the probe file: every job of that key is said
            # unpriced without a probe each (a paper-sized study has 300 LeNet evaluations)
            probes[s.key] = {"key": s.key, "failed": said}
        else:
            probes[s.key] = {"key": s.key, "fixed": fixed, "per": per}
            _keep_probe(probes[s.key])
    if s.key in probes:
        p = probes[s.key]
        if "failed" in p:
            return Price(math.nan, "none", p["failed"])
        return Price(s.reps * (p["fixed"] + p["per"] * s.n), "measured")
    return Price(math.nan, "none", "no record, no probe")


PROBED = ("train", "evaluate", "nads")
# "records": price from records alone, measure no model (a dry run then stays at its 2 s; what
# has no record is said unpriced); anything else: measure what has none
PROBES_ENV = "NADPIPE_DRY_RUN_COST"


def probing() -> bool:
    """Whether a dry run measures the models this machine has no record of (PROBES_ENV)."""
    return os.environ.get(PROBES_ENV, "") != "records"


# where a price came from, in the dry run's words
SOURCES = {
    "records": "from this machine's earlier runs",
    "scaled": "scaled from this machine's runs at another size",
    "measured": "measured now on this machine",
    "light": f"nadpipe's figure for a small job, {LIGHT} CPU-s (0 for an empty file)",
}


def machine() -> tuple[int, float]:
    """The cores this process may use (nadpipe.threads.cores_here: its affinity within its
    cgroup's quota), and the load on this machine now (the 1-minute load average: processes
    running or waiting for a core)."""
    return cores_here(), os.getloadavg()[0]


def share(cores: int, free: tuple[int, float]) -> float:
    """The cores a run's `cores` parallel jobs get on a machine of `free` (its cores and the
    load of its other work): all of them while the two fit, else their share of the machine,
    as the kernel divides the cores among every process that waits for one."""
    have, load = free
    k = max(1, min(cores, have))
    return float(k) if load + k <= have else have * k / (load + k)


def estimate(
    results: str,
    jobs: list[tuple[str, Size, Job | None]],
    cores: int,
    probe=None,
    elsewhere: bool = False,
    later: bool = False,
    free: tuple[int, float] | None = None,
) -> str:
    """The line a dry run ends with: its results folder, its jobs by kind, the time they take
    on this machine's `cores` as loaded now (`free`: its cores and load; `machine()` by
    default) and the CPU-seconds, the run's start-up among them, and where each kind's price
    came from. `jobs`: (rule, size, typed job); `probe(job)` measures a size now
    (nadpipe.pricing.probe); `elsewhere`: the jobs compute on a GPU or a cluster, which no
    record or probe of this machine's CPU prices; `later`: checkpoints will plan more jobs (NAD
    rounds)."""
    past, probes = records(results), _probed()
    priced = []  # (rule, size, price); a job's group in the line: a probed kind, or "others"
    kinds: dict[str, int] = {}
    sources: dict[str, list[str]] = {}
    for rule, s, job in jobs:
        measure = None
        if probe is not None and s.kind in PROBED and job is not None:
            measure = lambda job=job: probe(job)  # noqa: E731
        p = price(s, past, probes, measure)
        group = s.kind if s.kind in PROBED else "others"
        kinds[group] = kinds.get(group, 0) + 1
        if group not in sources.setdefault(p.source, []):
            sources[p.source].append(group)
        priced.append((rule, s, p))
    return _line(results, priced, kinds, sources, cores, free, later, elsewhere)


def _line(results, priced, kinds, sources, cores, free, later, elsewhere) -> str:
    """`estimate`'s line from its priced jobs: (rule, size, price), their count per kind, the
    kinds per source of price."""
    counts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    known = [p.cpu for _, _, p in priced if math.isfinite(p.cpu)]
    startup = START_RUN + START_JOB * len(priced) if priced else 0.0
    cpu = sum(known) + startup
    free = machine() if free is None else free
    got = share(cores, free)
    wall = (cpu - START_RUN) / got + START_RUN + PER_JOB * len(priced) if priced else 0.0
    said = "; ".join(
        f"{', '.join(sorted(sources[source]))}: {SOURCES[source]}"
        for source in SOURCES
        if source in sources
    )
    line = (
        f"nadpipe: the cost of {results}/ here: {len(priced)} jobs ({counts}), about "
        f"{clock(wall)} on {cores} core{'s' if cores != 1 else ''} at this machine's load now "
        f"({free[1]:.1f} on {free[0]} cores: its jobs get about {got:.1f}); {clock(cpu)} of "
        f"CPU, {clock(startup)} of it start-up ({said})"
    )
    missing = [(rule, s, p) for rule, s, p in priced if not math.isfinite(p.cpu)]
    if missing:
        rule, s, p = missing[0]
        line += f"; {len(missing)} job(s) not priced, e.g. {rule} of {s.arch}: {p.why}"
    if later:
        line += "; more once the NAD rounds say how many networks they need"
    if elsewhere:
        line += "; priced on this machine's CPU, while its jobs compute on a GPU or a cluster"
    return line
