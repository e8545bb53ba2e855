"""The protocol search: which protocol of a study fits a published reference best, found by
the real workflow. A coarse sweep (every combination of the values given per key), then rounds
of refinement around the best protocol so far (per numeric key, the geometric midpoints between
its value and the nearest values tried on either side). Each round is one Snakemake run of the
study with every protocol tried so far as a named protocol (`STUDY.protocols`), all rounds in
one results folder, so that no cell trains twice; the objective is the summary's own
`reference_mean_abs_diff` of the searched architecture (nadpipe.references). `nadpipe search`
is the command; the pure logic (axes, grid, refinement, names) needs neither torch nor
Snakemake."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import paths, search_table
from .io import atomic_write, beside, load_parquet, save_text
from .log import warn
from .search_table import FIT
from .studies import REGISTRY

DATA_KEYS = ("eps", "eps1", "eps2", "sigma", "n_train", "n_test")  # the schema's `protocol`
INTEGER_KEYS = ("n_train", "n_test", "train.epochs", "train.batch_size")

Point = tuple[tuple[str, float | int | str | None], ...]  # (key, value) pairs, sorted by key


def axis(text: str) -> tuple[str, list]:
    """'sigma=0.25,1,4' -> ('sigma', [0.25, 1.0, 4.0]); a key is a data key or train.NAME."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not values.strip():
        raise ValueError(f"{text!r}: say KEY=V1,V2,... (e.g. sigma=0.25,1,4)")
    if key not in DATA_KEYS and not (key.startswith("train.") and len(key) > 6):
        raise ValueError(f"{text!r}: {key!r} is neither {', '.join(DATA_KEYS)} nor train.NAME")
    parsed = [_value(key, v.strip()) for v in values.split(",")]
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"{text!r}: a value is given twice")
    return key, parsed


def _value(key: str, text: str):
    if text in ("null", "none", "None"):
        return None
    try:
        number = float(text)
    except ValueError:
        return text  # a schedule's name, say
    if key in INTEGER_KEYS:
        if number != int(number):
            raise ValueError(f"{key}={text}: {key} takes whole numbers")
        return int(number)
    return number


def coarse(axes: Mapping[str, Sequence]) -> list[Point]:
    """Every combination of the axes' values."""
    keys = sorted(axes)
    return [
        tuple(zip(keys, values, strict=True))
        for values in itertools.product(*(axes[k] for k in keys))
    ]


def _numeric(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _midpoint(key: str, a, b):
    m = math.sqrt(a * b)
    return round(m) if key in INTEGER_KEYS else float(f"{m:.3g}")


def _tried(key: str, tried: Sequence[Point]) -> list:
    return sorted({dict(p)[key] for p in tried if _numeric(dict(p).get(key))})


def edges(best: Point, tried: Sequence[Point]) -> list[str]:
    """The numeric keys along which `best` is the smallest or largest value tried (its best
    fit may lie beyond), as 'sigma 1 (the smallest tried)'."""
    out = []
    for key, value in best:
        values = _tried(key, tried)
        if _numeric(value) and len(values) > 1 and value in (values[0], values[-1]):
            side = "smallest" if value == values[0] else "largest"
            out.append(f"{key} {_text(value)} (the {side} tried)")
    return out


def refine(best: Point, tried: Sequence[Point]) -> list[Point]:
    """New protocols around `best`: per numeric key, the geometric midpoint towards the nearest
    value tried on each side, and where `best` is the smallest or largest value tried, one step
    outward (as far beyond it, geometrically, as its neighbour is on the other side); the other
    keys as in `best`; none tried already."""
    seen = set(tried)
    out: list[Point] = []
    here = dict(best)
    for key, value in best:
        if not _numeric(value):
            continue
        values = _tried(key, tried)
        below = [v for v in values if v < value]
        above = [v for v in values if v > value]
        steps = [_midpoint(key, value, other) for other in below[-1:] + above[:1]]
        if bool(below) != bool(above):  # on the edge of what was tried: step outward
            beyond = value * value / (above[0] if above else below[-1])
            steps.append(max(1, round(beyond)) if key in INTEGER_KEYS else float(f"{beyond:.3g}"))
        for m in steps:
            point = tuple(sorted({**here, key: m}.items()))
            if m not in values and point not in seen and _numeric(m):
                seen.add(point)
                out.append(point)
    return out


def protocol(point: Point) -> dict:
    """A point as a study's protocol entry: data keys at the top, train.NAME under `train`."""
    entry: dict = {}
    for key, value in point:
        if key.startswith("train."):
            entry.setdefault("train", {})[key[6:]] = value
        else:
            entry[key] = value
    return entry


def _text(value) -> str:
    """A value as written: 6 significant digits where they are the value (0.5, 3, 1e-05), else
    every digit it needs (0.1234567 and 0.1234568 stay two values)."""
    if not isinstance(value, float):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _short(value) -> str:
    return _text(value).replace(".", "p").replace("-", "m").replace("+", "")


def said(point: Point) -> str:
    """A point as a reader reads it: 'sigma 0.5, train.epochs 40'."""
    return ", ".join(f"{k} {_text(v)}" for k, v in point)


def name(point: Point) -> str:
    """A protocol name the schema accepts (letters, digits, _; at most 32): readable where it
    fits, else a digest."""
    parts = [f"{k.removeprefix('train.')}{_short(v)}" for k, v in point]
    text = "_".join(parts)
    if len(text) <= 32 and all(c.isalnum() or c == "_" for c in text):
        return text
    return "p" + hashlib.sha1(repr(point).encode()).hexdigest()[:12]


# ---- the driver: one Snakemake run per round -------------------------------------------------

CHECKOUT = Path(__file__).resolve().parents[2]  # the search runs the checkout's Snakefile
SNAKEFILE = CHECKOUT / "Snakefile"
SCHEMA = CHECKOUT / "workflow" / "schemas" / "config.schema.yaml"


class SearchError(ValueError):
    """The search cannot start or go on; the message names the option, the key or the file."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, as `nadpipe search` turns it: stopped as by Ctrl-C, its round stopped too."""


@dataclass(frozen=True)
class Search:
    """A search, checked: the config it writes per round (every study but `study` off, `study`
    of `arch` alone with its reference), where, and how Snakemake runs."""

    config: dict  # the merged config files, as Snakemake merges them, before the protocols
    configfiles: tuple[str, ...]
    study: str
    arch: str
    axes: dict[str, list]
    rounds: int
    cores: str
    snakemake_args: tuple[str, ...]
    results: str
    budget_minutes: float | None = None  # stop cleanly before this much time has passed
    resume: str | None = None  # a search.csv (of any machine) whose protocols count as measured

    @property
    def out(self) -> Path:
        return Path(self.results) / "search"

    @property
    def claim(self) -> dict:
        """What its table names: the architecture, the study, the reference (by content)."""
        return search_table.claim(self.config, self.study, self.arch)

    @property
    def configfile(self) -> Path:
        return self.out / "search.yaml"

    def with_protocols(self, points: Sequence[Point]) -> dict:
        """The config of a round: every point a named protocol of the study."""

        cfg = _merge(self.config, {s: {"enabled": False} for s in REGISTRY if s != self.study})
        settings = dict(cfg.get(self.study) or {})
        refs = settings.get("references") or {}
        settings.update(
            enabled=True,
            architectures=[self.arch],
            references={self.arch: refs[self.arch]} if self.arch in refs else {},
            protocols={name(p): protocol(p) for p in points},
        )
        return {**cfg, "results": self.results, self.study: settings}

    def command(self, *args: str) -> list[str]:
        """Snakemake on this search's config, from here; `-s` unless run from the checkout."""
        here = Path.cwd().resolve() == CHECKOUT
        where = [] if here else ["-s", str(SNAKEFILE)]
        return [*beside("snakemake"), *where, "--configfile", str(self.configfile), *args]


def _merge(base, new):
    """`new` over `base`, mappings key by key, anything else replaced (as Snakemake merges its
    config files)."""
    if isinstance(base, dict) and isinstance(new, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in new.items()}}
    return new


def _read_yaml(path: str, what: str) -> dict:
    try:
        with open(path) as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError:
        raise SearchError(f"{what} {path}: no such file") from None
    except yaml.YAMLError as e:
        raise SearchError(f"{what} {path} is not YAML: {e}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SearchError(f"{what} {path}: a config is a mapping of keys, not {type(raw).__name__}")
    return raw


def _axes(axes: Sequence[str]) -> dict[str, list]:
    """The axes the search sweeps, each --axis KEY=V1,V2,... parsed and checked."""
    parsed: dict[str, list] = {}
    for text in axes:
        try:
            key, values = axis(text)
        except ValueError as e:
            raise SearchError(f"--axis {e}") from None
        if key in parsed:
            raise SearchError(f"--axis {text!r}: {key} is given twice")
        parsed[key] = values
    if not parsed:
        raise SearchError("say what to search with --axis KEY=V1,V2,... (e.g. sigma=0.25,1,4)")
    return parsed


def prepare(
    configfiles: Sequence[str],
    study: str,
    arch: str,
    axes: Sequence[str],
    rounds: int = 3,
    cores: str = "all",
    snakemake_args: Sequence[str] = (),
    results: str | None = None,
    budget_minutes: float | None = None,
    resume: str | None = None,
) -> Search:
    """Check everything a search needs before its first job: the axes, the study, the
    architecture and its reference, and the first round's config as the workflow checks it."""
    # deferred: they load pandas and jsonschema, which importing search does not
    from . import config as nc
    from .references import comparable

    if not SNAKEFILE.exists():
        raise SearchError(
            f"the search runs the workflow of a checkout, and {SNAKEFILE} does not exist: "
            "install nadpipe from its checkout (pip install -e .) and run it there"
        )
    parsed = _axes(axes)
    if rounds < 1:
        raise SearchError(f"--rounds {rounds}: at least 1 (the coarse sweep)")
    if study not in REGISTRY:
        raise SearchError(f"--study {study!r}: no such study (the studies: {', '.join(REGISTRY)})")
    if study not in comparable():
        raise SearchError(
            f"--study {study}: takes no published reference, so no protocol fits one better "
            f"(the studies that do: {', '.join(comparable())})"
        )
    merged: dict = _read_yaml("config.yaml", "config") if Path("config.yaml").exists() else {}
    for f in configfiles:
        merged = _merge(merged, _read_yaml(f, "--configfile"))
    given = (merged.get(study) or {}).get("protocols")
    if given:
        raise SearchError(
            f"config key '{study}.protocols' is set ({', '.join(given)}): the search writes its "
            "own protocols; start from a config without them"
        )
    if arch not in ((merged.get(study) or {}).get("references") or {}):
        raise SearchError(
            f"config key '{study}.references.{arch}' is not set: the search fits {arch}'s "
            "protocols to that published table (a CSV: docs/nad-paper.md)"
        )
    search = Search(
        merged,
        tuple(configfiles),
        study,
        arch,
        parsed,
        rounds,
        cores,
        tuple(snakemake_args),
        results or f"results-search-{study}-{arch}",
        budget_minutes,
        resume,
    )
    if budget_minutes is not None and not budget_minutes > 0:
        raise SearchError(f"--budget-minutes {budget_minutes}: a positive number of minutes")
    if resume is not None:
        resumed(search)  # read now: a table that cannot serve is refused before any job
    try:
        nc.load_config(search.with_protocols(coarse(parsed)), SCHEMA)
    except nc.ConfigError as e:
        raise SearchError(f"{e}") from None
    return search


def fits(summary: str | Path, arch: str) -> dict[str, dict]:
    """Per protocol, the agreement the summary states for `arch` (its reference_* columns)."""

    df = load_parquet(summary)
    df = df[df["arch"] == arch]
    if df.empty or "reference_mean_abs_diff" not in df:
        raise SearchError(f"{summary}: no agreement with a reference for {arch}")
    first = df.groupby("protocol", sort=False)[[f"reference_{k}" for k in FIT]].first()
    out = {}
    for p, row in first.to_dict("index").items():
        fit = {k: float(row[f"reference_{k}"]) for k in FIT}
        out[p] = {**fit, "cells": int(fit["cells"]) if math.isfinite(fit["cells"]) else 0}
    return out


def noise(summary: str | Path, arch: str, study: str) -> dict[str, tuple[float, bool]]:
    """Per protocol, one standard error (points) of its mean |difference| from the published
    curve (each cell's test accuracy a binomial over its test images and seeds, the cells
    independent: two protocols whose fits lie within two of their combined errors are a tie),
    and whether any of its cells learned (a test accuracy above chance by three standard
    errors, nadpipe.findings.at_chance: a protocol whose models all guess fits nothing)."""
    # deferred: it loads pandas, which importing search does not
    from .findings import at_chance
    from .references import keys

    df = load_parquet(summary)
    test = df[(df["arch"] == arch) & (df["split"] == "test")]
    test = test[test["condition"] == test["condition"].iloc[0]] if len(test) else test
    out = {}
    for p, part in test.groupby(test["protocol"].fillna(""), sort=False):
        cells = [
            (float(c["accuracy"].mean()), int(c["n_test"].sum()))
            for _, c in part.groupby(keys(study))
        ]  # (mean test accuracy over seeds, test images over seeds) of each cell
        learned = any(not at_chance(a, n, 2) for a, n in cells)
        var = [a * (1 - a) / n for a, n in cells]
        out[p] = (100 * math.sqrt(sum(var)) / len(var) if var else math.nan, learned)
    return out


def table(tried: Mapping[Point, int], measured: Mapping[str, dict]) -> list[dict]:
    """One row per protocol tried (its round, name, values, fit and its noise, one standard
    error), best first: the smallest mean |difference|, then the smallest largest one; a
    protocol whose models all guess (`learned` false) after every one that learned, one without
    a fit (every cell diverged) last. `tied`: a protocol whose mean
    |difference| lies within two combined standard errors of the best's (a tie, not a
    ranking)."""
    rows = []
    for point, r in tried.items():
        fit = measured.get(name(point), {})
        rows.append(
            {
                "round": r,
                "protocol": name(point),
                **dict(point),
                **{k: fit.get(k, math.nan) for k in (*FIT, "noise")},
                "learned": bool(fit.get("learned", True)),
            }
        )

    def order(row):  # a protocol whose models learned before one whose models all guess
        m, x = row["mean_abs_diff"], row["max_abs_diff"]
        fits = math.isfinite(m)
        return (not fits, not row["learned"], m if fits else 0, x, row["protocol"])

    rows = sorted(rows, key=order)
    best = rows[0] if rows else None
    for row in rows:
        gap = abs(row["mean_abs_diff"] - best["mean_abs_diff"])
        within = 2 * math.sqrt(row["noise"] ** 2 + best["noise"] ** 2)
        row["tied"] = bool(row is not best and gap <= within)  # False where noise is unknown
    return rows


def markdown(rows: Sequence[dict], keys: Sequence[str]) -> str:
    """The table as markdown: the best protocol first."""

    def cell(v) -> str:
        if isinstance(v, float):
            return "n/a" if not math.isfinite(v) else f"{v:.3g}"
        return str(v)

    head = ["round", "protocol", *keys, "cells", "mean \\|diff\\|", "± 1 SE", "max \\|diff\\|",
            "Pearson"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for i, row in enumerate(rows):
        marks = ["tied"] * bool(row.get("tied")) + ["at chance"] * (not row.get("learned", True))
        shown = row["protocol"] + (f" ({', '.join(marks)})" if marks else "")
        values = [
            row["round"],
            f"**{row['protocol']}**{shown[len(row['protocol']) :]}" if i == 0 else shown,
            *(row[k] for k in keys),
            row["cells"],
            round(row["mean_abs_diff"], 2),
            round(row.get("noise", math.nan), 2),
            round(row["max_abs_diff"], 2),
            round(row["pearson"], 3),
        ]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) + "\n"


def _steps(log: Path, seen: str) -> str:
    """Snakemake's latest 'N of M steps (P%) done' in its log ('' before the first)."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return seen
    done = [line for line in text.splitlines() if " steps (" in line and ") done" in line]
    return done[-1].strip() if done else seen


def _snakemake(search: Search, configfile: Path, *args: str) -> list[str]:
    """Snakemake making the study's summary under `configfile`, from here."""

    target = paths.SUMMARY.format(root=search.results, study=search.study)
    return [
        sys.executable,
        "-m",
        "snakemake",
        target,
        "-s",
        str(SNAKEFILE),
        "-d",
        ".",
        "--configfile",
        str(configfile),
        "--cores",
        search.cores,
        *args,
        *search.snakemake_args,
    ]


def plan(search: Search) -> tuple[dict[str, int], str]:
    """What round 1 would run: Snakemake's dry run of it, as jobs per rule ({} when every cell is
    made already), and the line its dry run ends with, its cost on this machine ("" when none:
    nadpipe.cost). Writes nothing of the search's (its config goes to a temporary file)."""

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "search.yaml"
        save_text(yaml.safe_dump(search.with_protocols(coarse(search.axes))), config)
        res = subprocess.run(_snakemake(search, config, "-n"), capture_output=True, text=True)
    out = res.stdout + res.stderr
    if res.returncode != 0:
        tail = "\n".join(out.splitlines()[-25:])
        raise SearchError(f"round 1's dry run failed (exit {res.returncode}):\n{tail}")
    cost = re.search(r"^nadpipe: the cost of .*$", out, re.M)
    return job_stats(out), cost[0].removeprefix("nadpipe: ") if cost else ""


def job_stats(output: str) -> dict[str, int]:
    """Jobs per rule, from the job stats Snakemake prints ({} when it had nothing to do)."""
    stats = re.search(r"Job stats:\n(.*?)\ntotal", output, re.S)
    if stats is None:
        return {}
    return {rule: int(n) for rule, n in re.findall(r"^(\S+)\s+(\d+)$", stats[1], re.M)}


def resumed(search: Search) -> dict[Point, tuple[int, dict]]:
    """The protocols a previous search measured (search.resume, its search.csv, made on any
    machine): point -> (round, fit). Refused, naming the file and what differs, where it is
    another search's (architecture, study, reference, axes) or holds what no fit can be
    (nadpipe.search_table)."""
    # deferred: it loads pandas, which importing search does not
    import pandas as pd

    path = search.resume
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise SearchError(f"--resume {path}: no such file (a search's search.csv)") from None
    except Exception as e:  # noqa: BLE001 -- any reader's error: say which file
        raise SearchError(f"--resume {path}: cannot be read as a search table ({e})") from None
    keys = sorted(search.axes)
    try:
        notes = search_table.check(frame, search.claim, keys)
    except search_table.TableError as e:
        raise SearchError(f"--resume {path}: {e}") from None
    for note in notes:
        warn(f"--resume {path}: {note}")
    out = {}
    for row in frame.to_dict("records"):
        point = tuple((k, _value(k, str(row[k])) if row[k] == row[k] else None) for k in keys)
        if name(point) != row["protocol"]:
            raise SearchError(
                f"--resume {path}: protocol {row['protocol']!r} has the values "
                f"{said(point)}, whose name is {name(point)!r}: the table was edited"
            )
        fit = {k: row[k] for k in FIT}
        for key in ("noise", "learned"):  # tables before 0.11.0 have neither
            if key in row:
                fit[key] = row[key]
        out[point] = (int(row["round"]), fit)
    return out


def trainings(log: Path) -> int:
    """The trainings a round ran, from the job stats Snakemake printed in its log (the cells'
    train jobs, and a group of seeds' one each)."""
    jobs = job_stats(log.read_text(errors="replace")).items()
    return sum(n for rule, n in jobs if rule == "train" or re.fullmatch(r"train_\w+_seeds", rule))


def run_round(
    search: Search,
    r: int,
    points: Sequence[Point],
    say: Callable[[str], None],
    deadline: float | None = None,
) -> bool:
    """One Snakemake run of the study's summary under every protocol in `points`; its output in
    round{r}.log, its progress said as it goes. At `deadline` (time.monotonic), Snakemake is
    stopped as Ctrl-C stops it (finished cells stay, a training resumes from its checkpoint):
    False then, True when the round finished."""
    search.out.mkdir(parents=True, exist_ok=True)
    save_text(yaml.safe_dump(search.with_protocols(points), sort_keys=False), search.configfile)
    cmd = _snakemake(search, search.configfile)
    log = search.out / f"round{r}.log"
    say(f"round {r}: {shlex.join([*beside('snakemake'), *cmd[3:]])} (its output: {log})")
    stops = {signal.SIGINT, signal.SIGTERM}
    with open(log, "w") as f:
        # held until the round's process is known, so that a Ctrl-C or kill meanwhile stops it
        # (below) instead of leaving it running; the round itself takes them as usual
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, stops),
            )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # one held is raised here
            if not _follow(proc, r, log, say, deadline):
                return False
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated)
            say(f"round {r}: interrupted: stopping Snakemake (finished cells stay)")
            # a terminal's Ctrl-C reached Snakemake too: it is stopping already
            _stop(proc, grace=0 if isinstance(e, Terminated) else 5)
            raise
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise SearchError(
            f"round {r}: Snakemake failed (exit {proc.returncode}); the end of {log}:\n{tail}"
        )
    return True


def _stop(proc: subprocess.Popen, grace: float = 0) -> None:
    """Stop a Snakemake round as Ctrl-C stops it (its running jobs end, finished cells stay),
    unless it ends by itself within `grace` seconds; killed if it has not ended two minutes
    later."""
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _follow(proc, r: int, log: Path, say, deadline: float | None) -> bool:
    """Say a round's progress until it ends (True) or `deadline` stops it (False)."""
    seen = ""
    while True:
        wait = 5.0 if deadline is None else max(0.1, min(5.0, deadline - time.monotonic()))
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            say(f"round {r}: the budget is spent: stopping Snakemake (finished cells stay)")
            _stop(proc)
            return False
        now = _steps(log, seen)
        if now != seen:
            seen = now
            say(f"round {r}: {now}")
    return True


@dataclass
class Outcome:
    """How a search ended: its table (best first), and whether its budget stopped it."""

    rows: list[dict]
    stopped: str | None = None  # why the budget or the user stopped it (None: it ran its rounds)
    interrupted: bool = False  # Ctrl-C or SIGTERM, not the budget


def sweep(search: Search, say: Callable[[str], None]) -> Outcome:
    """The coarse sweep (or, resumed, the best of the table so far), then rounds of
    refinement around the best protocol so far, until `search.rounds` rounds ran, no untried
    point is left, or the budget cannot pay the next round (its cost planned from the seconds
    a training took so far) or is spent. After each round the table, its markdown and the
    figure are written (search.csv, search.md, search.png): the state a later search resumes
    from (`--resume`), on any machine."""
    summary = paths.SUMMARY.format(root=search.results, study=search.study)
    far, tried, measured, rows, points, first = _start(search, say)
    start = time.monotonic()
    deadline = None if search.budget_minutes is None else start + 60 * search.budget_minutes
    per_training, per_protocol = None, 1  # seconds a training, trainings a protocol: measured
    last = first + search.rounds - 1
    for r in range(first, last + 1):
        if not points:
            say(f"round {r}: no untried protocol around the best: the search is done")
            break
        new = points
        why = _unaffordable(r, len(new) * per_protocol, per_training, deadline)
        if why:
            say(f"round {r}: not started: {why}")
            write(search, rows, summary)
            return Outcome(rows, why)
        tried.update({p: r for p in new})
        say(
            f"round {r} of at most {last}: {len(new)} new protocol(s) "
            f"({'; '.join(said(p) for p in new)}), {len(tried)} in all"
        )
        began = time.monotonic()
        try:
            finished = run_round(search, r, [p for p in tried if p not in far], say, deadline)
        except KeyboardInterrupt:
            if not rows:  # nothing measured: nothing to go on from
                raise
            write(search, rows, summary)
            why = f"interrupted in round {r}, whose {len(new)} protocol(s) are unmeasured"
            return Outcome(rows, why, interrupted=True)
        if not finished:
            why = f"the budget ran out in round {r}, whose {len(new)} protocol(s) are unmeasured"
            if rows:
                write(search, rows, summary)
            return Outcome(rows, why)
        trained = trainings(search.out / f"round{r}.log")
        if trained:
            per_training = (time.monotonic() - began) / trained
            per_protocol = max(1, round(trained / len(new)))
        rows = _measure(search, r, tried, measured, summary)
        points = _next(search, r, rows[0], tried, say, r < last)
    return Outcome(rows)


def _unaffordable(r: int, trainings: int, per_training, deadline) -> str | None:
    """Why round `r` of `trainings` cannot be paid from what the budget has left (its cost
    planned from the seconds a training took so far); None when it can, or nothing says."""
    if deadline is None or per_training is None:
        return None
    need, left = per_training * trainings, deadline - time.monotonic()
    if need <= left:
        return None
    return (
        f"round {r} would train {trainings} models, about {need / 60:.1f} min at "
        f"{per_training:.1f} s each as measured, and {max(left, 0) / 60:.1f} min of the budget "
        "are left"
    )


def _start(search: Search, say: Callable[[str], None]):
    """Where a search starts: (protocols measured elsewhere, round of each tried protocol,
    their fits, the table, the points of the first round, its number)."""
    if not search.resume:
        return {}, {}, {}, [], coarse(search.axes), 1
    far = resumed(search)
    tried = {p: r for p, (r, _) in far.items()}
    measured = {name(p): fit for p, (_, fit) in far.items()}
    rows = table(tried, measured)
    best = _point(rows[0], search)
    first = max(tried.values()) + 1
    say(
        f"resumed from {search.resume}: {len(tried)} protocol(s) measured in rounds 1 to "
        f"{first - 1}, none trained again; best so far {rows[0]['protocol']} ({said(best)})"
    )
    return far, tried, measured, rows, refine(best, list(tried)), first


def _measure(search: Search, r: int, tried: dict, measured: dict, summary: str) -> list[dict]:
    """Round `r`'s fits and noise read from the summary into `measured`; the table written."""
    measured.update(fits(summary, search.arch))
    for p, (se, learned) in noise(summary, search.arch, search.study).items():
        if p in measured:
            measured[p] = {**measured[p], "noise": se, "learned": learned}
    rows = table(tried, measured)
    write(search, rows, summary)
    if not math.isfinite(rows[0]["mean_abs_diff"]):
        raise SearchError(f"round {r}: no protocol has a fit (see {summary})")
    return rows


def _next(search: Search, r: int, best: dict, tried: dict, say, more: bool) -> list[Point]:
    """Say round `r`'s best; the points of the next round around it (`more`: one follows)."""
    say(
        f"round {r}: best so far {best['protocol']} ({said(_point(best, search))}): mean "
        f"|difference| {best['mean_abs_diff']:.2f} points, largest "
        f"{best['max_abs_diff']:.2f}, over {best['cells']} cells"
    )
    points = refine(_point(best, search), list(tried))
    edge = edges(_point(best, search), list(tried))
    if edge:
        say(
            f"round {r}: the best lies on the edge of what was tried: {'; '.join(edge)}; "
            + (
                "the next round steps outward"
                if more and points
                else "a better fit may lie beyond it: search again with values past it"
            )
        )
    return points


def _point(row: dict, search: Search) -> Point:
    return tuple((k, row[k]) for k in sorted(search.axes))


def write(search: Search, rows: Sequence[dict], summary: str) -> None:
    """search.csv (every protocol's values and fit), search.md (the same as a table) and
    search.png (the fits, and the best protocol's cells against the published ones)."""
    # deferred: they load matplotlib and pandas, which importing search does not
    import pandas as pd

    from .plots_compare import search_figure

    keys = sorted(search.axes)
    frame = pd.DataFrame(list(rows)).assign(**search.claim)
    search.out.mkdir(parents=True, exist_ok=True)
    atomic_write(search.out / "search.csv", lambda tmp: frame.to_csv(tmp, index=False))
    save_text(markdown(rows, keys), search.out / "search.md")
    if Path(summary).exists():  # a search resumed elsewhere and stopped before a round: none
        search_figure(frame, keys, summary, search.arch, str(search.out / "search.png"))
