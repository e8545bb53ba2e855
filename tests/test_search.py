"""The protocol search (nadpipe.search, `nadpipe search`): its axes, coarse grid and refinement,
the errors it gives before any job, and a tiny search through the real workflow whose table is
the summary's, whose second round refines around the first's best without retraining a cell,
and whose closing advice works as printed."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import command, snakemake

from nadpipe import cli
from nadpipe import search as ns
from nadpipe.references import agreement

SCRIPT = shutil.which("nadpipe", path=str(Path(sys.executable).parent)) or shutil.which("nadpipe")


def test_axes_are_read_as_the_config_types_them():
    assert ns.axis("sigma=0.25,1,4") == ("sigma", [0.25, 1.0, 4.0])
    assert ns.axis("train.epochs=10,20") == ("train.epochs", [10, 20])
    assert ns.axis("train.grad_clip=0.5,null") == ("train.grad_clip", [0.5, None])
    assert ns.axis("train.lr_schedule=linear_decay,onecycle")[1] == ["linear_decay", "onecycle"]
    for bad, said in [
        ("sigma", "say KEY=V1,V2"),
        ("sigma=", "say KEY=V1,V2"),
        ("width=1,2", "'width' is neither eps, eps1, eps2, sigma, n_train, n_test nor train.NAME"),
        ("n_train=100,150.5", "n_train takes whole numbers"),
        ("sigma=1,1.0", "a value is given twice"),
    ]:
        with pytest.raises(ValueError, match=re.escape(said)):
            ns.axis(bad)


def test_the_coarse_grid_is_every_combination_and_refinement_halves_the_gaps_around_the_best():
    grid = ns.coarse({"sigma": [0.25, 1.0, 4.0], "train.epochs": [10, 40]})
    assert len(grid) == 6 and grid[0] == (("sigma", 0.25), ("train.epochs", 10))
    # geometric midpoints towards the nearest value tried on each side, one key at a time
    best = (("sigma", 1.0), ("train.epochs", 10))
    assert ns.refine(best, grid) == [
        (("sigma", 0.5), ("train.epochs", 10)),
        (("sigma", 2.0), ("train.epochs", 10)),
        (("sigma", 1.0), ("train.epochs", 20)),  # 10 and 40: sqrt(400), a whole number
        (("sigma", 1.0), ("train.epochs", 2)),  # 10 is the fewest tried: one step outward
    ]
    # at the edge of the range: the midpoint on its one side, and one step outward (as far
    # beyond, geometrically, as its neighbour: 0.25^2 / 1); said as the edge
    coarse = ns.coarse({"sigma": [0.25, 1.0, 4.0]})
    assert ns.refine((("sigma", 0.25),), coarse) == [(("sigma", 0.5),), (("sigma", 0.0625),)]
    assert ns.edges((("sigma", 0.25),), coarse) == ["sigma 0.25 (the smallest tried)"]
    assert ns.edges((("sigma", 1.0),), coarse) == []
    # the case that stayed put before: started at 1, 3, 9 around the stated 3, best at 1
    assert (("sigma", 0.333),) in ns.refine((("sigma", 1.0),), ns.coarse({"sigma": [1, 3, 9.0]}))
    tried = [(("sigma", s),) for s in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert ns.refine((("sigma", 0.5),), tried) == [(("sigma", 0.354),), (("sigma", 0.707),)]
    # nothing new around a point already surrounded by its midpoints; a name has no neighbours
    assert ns.refine((("sigma", 1.0),), [(("sigma", 1.0),)]) == []
    assert ns.refine((("train.lr_schedule", "onecycle"),), []) == []


def test_protocol_entries_and_names_are_what_the_config_accepts():
    point = (("sigma", 0.5), ("train.epochs", 40), ("train.grad_clip", None))
    assert ns.protocol(point) == {"sigma": 0.5, "train": {"epochs": 40, "grad_clip": None}}
    assert ns.name((("sigma", 0.354),)) == "sigma0p354"
    assert ns.name((("eps", -1.5),)) == "epsm1p5"
    long = ns.name((("n_train", 50000), ("sigma", 0.354), ("train.lr_max", 0.05)))
    assert re.fullmatch(r"p[0-9a-f]{12}", long)  # over 32 characters: a digest
    assert ns.said(point) == "sigma 0.5, train.epochs 40, train.grad_clip None"
    # values that 6 digits do not tell apart keep every digit they need: two protocols
    near = [(("sigma", 0.1234567),), (("sigma", 0.1234568),)]
    assert [ns.name(p) for p in near] == ["sigma0p1234567", "sigma0p1234568"]
    assert [ns.said(p) for p in near] == ["sigma 0.1234567", "sigma 0.1234568"]
    assert ns.name((("sigma", 3.0),)) == "sigma3"  # as before: existing protocols keep names


CONFIG = {
    "architectures": {"tiny": {"model": "lenet", "nads_file": "basis.npy"}},
    "nad_pairs": {"enabled": False},
    "single_direction": {
        "enabled": True,
        "architectures": ["tiny"],
        "indices": [0, 1000],
        "n_train": 400,
        "n_test": 200,
        "train": {"epochs": 2},
        "references": {"tiny": {"file": "nads.csv", "column": "acc"}},
    },
}


def _workdir(path: Path) -> Path:
    (path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    basis, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((1024, 1024)))
    np.save(path / "basis.npy", basis.T.astype(np.float32))  # rows: the NADs
    index = np.arange(1024)
    pd.DataFrame({"index": index, "acc": 100 - 50 * index / 1023}).to_csv(
        path / "nads.csv", index=False
    )
    return path


def nadpipe(
    cwd: Path, *args: str, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    res = subprocess.run([SCRIPT, *args], capture_output=True, text=True, cwd=cwd, env=env)
    if check and res.returncode != 0:
        raise AssertionError(f"nadpipe {shlex.join(args)}:\n{res.stdout}\n{res.stderr[-3000:]}")
    return res


SEARCH = ("search", "--study", "single_direction", "--arch", "tiny", "--axis",
          "sigma=0.25,1,4", "--rounds", "2", "--cores", "2")  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    workdir = _workdir(tmp_path_factory.mktemp("search"))
    return workdir, nadpipe(workdir, *SEARCH)


def _jobs(output: str) -> dict[str, int]:
    """Jobs per rule from Snakemake's job stats in its output ({} when it had nothing to do)."""
    stats = re.search(r"Job stats:\n(.*?)\ntotal", output, re.S)
    return {} if stats is None else {
        rule: int(n) for rule, n in re.findall(r"^(\S+)\s+(\d+)$", stats[1], re.M)
    }  # fmt: skip


def _trained(log: Path) -> int:
    """The trainings of a round, from its log: the cells' train jobs (not their ahead files,
    trains_alone, nor batches, train_together_N, whose cells have train jobs of their own)."""
    jobs = _jobs(log.read_text()).items()
    return sum(n for rule, n in jobs if rule == "train" or re.fullmatch(r"train_\w+_seeds", rule))


def test_the_search_table_is_the_summarys_fit_best_first(searched):
    workdir, res = searched
    out = workdir / "results-search-single_direction-tiny" / "search"
    table = pd.read_csv(out / "search.csv")
    summary = pd.read_parquet(out.parent / "single_direction" / "summary.parquet")
    ref = pd.read_csv(workdir / "nads.csv").set_index("index")["acc"].rename_axis("nad_k")
    assert list(table["round"]).count(1) == 3
    for row in table.itertuples():
        test = summary[(summary.protocol == row.protocol) & (summary.split == "test")]
        assert test["sigma"].iloc[0] == pytest.approx(row.sigma)  # the data drawn at its sigma
        mine = test.groupby("nad_k")["accuracy"].mean() * 100
        fit = agreement(mine, ref)  # recomputed from the accuracies, not read back
        assert row.cells == fit["cells"] == 2
        assert row.mean_abs_diff == pytest.approx(fit["mean_abs_diff"])
        assert row.max_abs_diff == pytest.approx(fit["max_abs_diff"])
    assert list(table["mean_abs_diff"]) == sorted(table["mean_abs_diff"])  # best first
    # each fit's noise: one standard error from the cells' test images (binomial), and the ties
    # within two combined errors of the best, recomputed here
    for row in table.itertuples():
        test = summary[(summary.protocol == row.protocol) & (summary.split == "test")]
        cells = test[test.condition == test.condition.iloc[0]].groupby("nad_k")
        var = [c.accuracy.mean() * (1 - c.accuracy.mean()) / c.n_test.sum() for _, c in cells]
        assert row.noise == pytest.approx(100 * np.sqrt(sum(var)) / len(var))
    first = table.iloc[0]
    tied = [abs(r.mean_abs_diff - first.mean_abs_diff) <= 2 * np.hypot(r.noise, first.noise)
            for r in table.iloc[1:].itertuples()]  # fmt: skip
    assert list(table["tied"]) == [False, *tied]
    names = ", ".join(r.protocol for r in table.itertuples() if r.tied)
    said = f"tied with it within the noise (two standard errors of the test sets): {names}"
    if not first.learned:  # LeNet after 2 epochs guesses: said, not ranked as a finding
        said = "none of the protocols' models learned (every cell's test accuracy at chance"
    assert (
        said if names or not first.learned else "no other protocol lies within the noise"
    ) in res.stdout
    # a protocol learned where a cell's test accuracy is above chance by three standard errors
    for row in table.itertuples():
        test = summary[(summary.protocol == row.protocol) & (summary.split == "test")]
        cells = test[test.condition == test.condition.iloc[0]].groupby("nad_k")
        above = [c.accuracy.mean() > 0.5 + 3 * np.sqrt(0.25 / c.n_test.sum()) for _, c in cells]
        assert row.learned == any(above)
    # round 2 refined around round 1's best, at the geometric midpoints towards its neighbours
    first = table[table["round"] == 1].iloc[0]
    expected = ns.refine((("sigma", first.sigma),), [(("sigma", s),) for s in (0.25, 1.0, 4.0)])
    assert sorted(table[table["round"] == 2]["sigma"]) == sorted(p[0][1] for p in expected)
    # each cell trained once: round 2 trained only its own protocols' cells
    assert _trained(out / "round1.log") == 3 * 2
    assert _trained(out / "round2.log") == 2 * len(expected)
    assert "| round | protocol | sigma | cells |" in res.stdout
    best = table.iloc[0]
    assert f"best: {best.protocol} (sigma {best.sigma:g}, round {best['round']})" in res.stdout
    assert (out / "search.md").read_text() in res.stdout  # the table as printed
    assert (out / "search.png").stat().st_size > 10_000
    said = res.stderr
    assert "round 1 of at most 2: 3 new protocol(s) (sigma 0.25; sigma 1; sigma 4)" in said
    assert f"round 2 of at most 2: {len(expected)} new protocol(s)" in said
    assert f"{3 + len(expected)} in all" in said


def test_the_printed_advice_redraws_every_protocol_without_training(searched):
    workdir, res = searched
    line = re.search(r"every protocol's figures and report: (.*)$", res.stdout, re.M)[1]
    done = command(workdir, line)  # exactly as printed, from where the search ran
    jobs = _jobs(done.stderr)
    assert jobs and not any("train" in rule for rule in jobs)
    root = workdir / "results-search-single_direction-tiny"
    # the figure (one curve per protocol, the published one beside) and the report's table
    assert (root / "single_direction/plots/accuracy_tiny.png").stat().st_size > 10_000
    table = pd.read_csv(root / "search/search.csv")
    html = (root / "report/summary_single_direction.html").read_text()
    assert all(name in html for name in table["protocol"])
    # the protocol it proposes is one the config accepts, as printed
    entry = re.search(r"as a protocol: single_direction: (.*)$", res.stdout, re.M)[1]
    protocols = yaml.safe_load(entry)["protocols"]
    ((name, values),) = protocols.items()
    assert name == table.iloc[0]["protocol"] and values == {"sigma": table.iloc[0]["sigma"]}
    # put into the config as said (here beside the search's results), it is the cells measured
    change = {"results": root.name, "single_direction": {"protocols": protocols}}
    (workdir / "best.yaml").write_text(yaml.safe_dump(change))
    out = snakemake(
        workdir, "-n", "--cores", "1", "--configfile", str(workdir / "best.yaml")
    ).stdout
    # its model is made: only the summary and figures are planned
    assert not any("train" in rule for rule in _jobs(out))


def test_a_dry_run_says_what_round_1_would_run_and_writes_nothing(tmp_path):
    workdir = _workdir(tmp_path)
    # as a user's: the models it has no record of measured (the suite prices from records)
    env = {**os.environ, "NADPIPE_DRY_RUN_COST": "measure", "NADPIPE_CACHE": str(tmp_path / "c")}
    res = nadpipe(workdir, *SEARCH, "--dry-run", env=env)
    # NADs read from the basis file (and what would compute them, the output cache's key), 3
    # protocols x 2 indices trained (each with its empty ahead file: trained alone,
    # nadpipe.batching) and evaluated, the summary
    assert res.stdout.startswith(
        "round 1 would run 21 jobs (nad_code 1, nads 1, trains_alone 6, train 6, evaluate 6, "
        "aggregate 1) for 3 protocol(s): sigma 0.25; sigma 1; sigma 4\n"
    ), res.stdout
    assert (
        "each later round: at most 2 protocol(s)" in res.stdout
        and "2 train job(s) each" in res.stdout
    )
    # and what round 1 costs here (nadpipe.cost): its 21 jobs, priced
    cost = re.search(r"^round 1: the cost of results-search-single_direction-tiny/ here: 21 jobs "
                     r"\(.*\), about [\d.]+ (s|min) on 2 cores at this machine's load now \(",
                     res.stdout, re.M)  # fmt: skip
    assert cost is not None and "not priced" not in res.stdout, res.stdout
    assert not list(workdir.glob("results*"))


@pytest.mark.parametrize(
    "args, change, said",
    [
        (["--axis", "width=1,2"], {}, "--axis 'width=1,2': 'width' is neither"),
        ([], {}, "say what to search with --axis KEY=V1,V2"),
        (["--axis", "sigma=1,2", "--axis", "sigma=3,4"], {}, "sigma is given twice"),
        (["--axis", "eps1=1,2"], {},
         "config key 'single_direction.protocols.eps11.eps1': the data of single_direction "
         "have no 'eps1'"),
        (["--axis", "sigma=1,2", "--study", "nad_pairs"], {},
         "--study nad_pairs: takes no published reference"),
        (["--axis", "sigma=1,2", "--study", "nope"], {}, "--study 'nope': no such study"),
        (["--axis", "sigma=1,2", "--rounds", "0"], {}, "--rounds 0: at least 1"),
        (["--axis", "sigma=1,2", "--configfile", "missing.yaml"], {},
         "--configfile missing.yaml: no such file"),
        (["--axis", "sigma=1,2"], {"single_direction": {"protocols": {"mine": {}}}},
         "config key 'single_direction.protocols' is set (mine): the search writes its own"),
        (["--axis", "sigma=1,2"], {"single_direction": {"references": None}},
         "config key 'single_direction.references.tiny' is not set"),
        (["--axis", "sigma=1,2", "--results", "../out"], {}, "config key 'results'"),
        (["--axis", "sigma=1,2", "--snakemake=-n"], {},
         "--snakemake -n: a search runs its rounds for real; `nadpipe search --dry-run` says"),
        (["--axis", "sigma=1,2", "--snakemake", "--config nads.n_networks=50"], {},
         "--snakemake: --config nads.n_networks=50: Snakemake takes no dotted key; give it "
         "nested, in YAML: --config 'nads={n_networks: 50}'"),
        (["--axis", "sigma=1,2", "--snakemake", '"unbalanced'], {},
         "--snakemake '\"unbalanced': cannot split it as a shell would (No closing quotation)"),
    ],
)  # fmt: skip
def test_a_search_that_cannot_mean_anything_is_refused_before_any_job(
    args, change, said, tmp_path, monkeypatch, capsys
):
    workdir = _workdir(tmp_path)
    if change:
        (workdir / "config.yaml").write_text(yaml.safe_dump(ns._merge(CONFIG, change)))
    study = ["--study", "single_direction"] if "--study" not in args else []
    monkeypatch.chdir(workdir)  # in-process: the installed command's refusals are cli.main's
    code = cli.main(["search", *study, "--arch", "tiny", *args])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert err.startswith("nadpipe search: ")
    assert not list(workdir.glob("results*"))  # nothing written, nothing run


def test_ctrl_c_in_a_search_says_so_without_a_traceback(tmp_path):
    workdir = _workdir(tmp_path)
    # as a terminal's Ctrl-C: SIGINT to the whole process group, once round 1 has started
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as said, as on a terminal
    # ... where SIGINT is not ignored: a suite started in the background of a shell without job
    # control (`pytest &`) hands its processes SIGINT ignored, and Python then installs no
    # KeyboardInterrupt (seen: the search ran both rounds to exit 0)
    proc = subprocess.Popen(
        [SCRIPT, *SEARCH], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=env, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if re.search(r"INFO: round 1: \S*snakemake ", line):
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest = proc.communicate(timeout=120)[0]
    out = "".join(seen) + rest
    assert proc.returncode == 130, out
    assert "nadpipe search: interrupted" in out and "Traceback" not in out


def test_without_a_checkout_the_search_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    # an install from a wheel has no Snakefile beside the package
    monkeypatch.setattr(ns, "SNAKEFILE", tmp_path / "site-packages" / "Snakefile")
    monkeypatch.chdir(_workdir(tmp_path))
    assert cli.main([*SEARCH]) == 2
    err = capsys.readouterr().err
    assert "Snakefile does not exist: install nadpipe from its checkout (pip install -e .)" in err


def test_a_search_resumes_on_another_machine_and_stops_at_its_budget(searched, tmp_path):
    workdir, _ = searched
    table = workdir / "results-search-single_direction-tiny" / "search" / "search.csv"
    before = pd.read_csv(table)
    # another machine: the table alone, no result; weights temporary (keep_models: false)
    other = _workdir(tmp_path)
    (other / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "keep_models": False}))
    shutil.copy(table, other / "earlier.csv")
    res = nadpipe(other, *SEARCH[:-4], "--rounds", "1", "--cores", "2", "--resume",
                  "earlier.csv")  # fmt: skip
    out = other / "results-search-single_direction-tiny"
    after = pd.read_csv(out / "search" / "search.csv")
    new = after[~after["protocol"].isin(before["protocol"])]
    assert set(new["round"]) == {3} and len(new) >= 1
    # no protocol trained twice: round 3 trained its own protocols' cells alone
    assert ns.trainings(out / "search" / "round3.log") == 2 * len(new)
    assert not (out / "search" / "round1.log").exists()
    merged = after.set_index("protocol").loc[before["protocol"], "mean_abs_diff"]
    assert list(merged) == list(before["mean_abs_diff"])  # the resumed fits, as measured
    assert "resumed from earlier.csv: 5 protocol(s) measured in rounds 1 to 2" in res.stderr
    # a search's folder without weights: the records and evaluations, kilobytes a cell
    assert not list(out.glob("single_direction/models/**/*.pt"))
    assert len(list(out.glob("single_direction/models/**/*.json"))) == 2 * len(new)
    # a budget spent inside a round: stopped, the table kept, and the way on printed
    res = nadpipe(other, *SEARCH[:-4], "--rounds", "1", "--cores", "2", "--budget-minutes",
                  "0.01", "--resume", str(out / "search" / "search.csv"))  # fmt: skip
    assert "stopped at its budget: the budget ran out in round 4" in res.stderr
    line = re.search(r"go on, here or on another machine, with: (.*)$", res.stderr, re.M)[1]
    assert pd.read_csv(out / "search" / "search.csv").equals(after)
    again = subprocess.run(shlex.split(line), capture_output=True, text=True, cwd=other)
    assert again.returncode == 0 and "resumed from" in again.stderr, again.stderr[-2000:]


TWO = ns._merge(CONFIG, {
    "architectures": {"tiny2": {"model": "lenet", "nads_file": "basis.npy"}},
    "single_direction": {"architectures": ["tiny", "tiny2"],
                         "references": {"tiny2": {"file": "nads.csv", "column": "acc"}}},
})  # fmt: skip


def _edited(frame: pd.DataFrame, how: str) -> pd.DataFrame:
    """The table of a finished search, edited as a user or a bad copy might."""
    f = frame.copy()
    first = f.index[0]
    if how == "study":
        f["study"] = "fourier"
    elif how == "old":  # a table of nadpipe 0.14: it names no search
        f = f.drop(columns=["arch", "study", "reference"])
    elif how == "axis":
        f["lr"] = 0.1
    elif how == "twice":
        f = pd.concat([f, f.iloc[[0]]])
    elif how == "round text":
        f["round"] = f["round"].astype(object)
        f.loc[first, "round"] = "two"
    elif how == "round half":
        f["round"] = f["round"].astype(float)
        f.loc[first, "round"] = 1.5
    else:  # a fit that is no |difference|: negative, infinite, or missing where cells fit
        f.loc[first, "mean_abs_diff"] = {"negative": -5.0, "inf": np.inf, "nan": np.nan}[how]
    return f


@pytest.mark.parametrize(
    "how, said",
    [
        ("study", "it is another search's: its study 'fourier', not 'single_direction'"),
        ("axis", "the axis key(s) lr beyond this search's: it is no table of a search over sigma"),
        ("twice", "appears more than once: the table was edited"),
        ("round text", "round 'two', not a round (1, 2, ...)"),
        ("round half", "round 1.5, not a round (1, 2, ...)"),
        ("negative", "mean_abs_diff is -5.0, not a |difference| in points (finite, 0 or more)"),
        ("inf", "mean_abs_diff is inf, not a |difference| in points"),
        ("nan", "mean_abs_diff is nan, not a |difference| in points"),
    ],
)
def test_a_table_that_is_not_this_searchs_is_refused_naming_what_differs(
    searched, how, said, tmp_path, monkeypatch, capsys
):
    workdir, _ = searched
    table = pd.read_csv(workdir / "results-search-single_direction-tiny" / "search" / "search.csv")
    monkeypatch.chdir(_workdir(tmp_path))
    _edited(table, how).to_csv("edited.csv", index=False)
    code = cli.main([*SEARCH, "--resume", "edited.csv"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("nadpipe search: --resume edited.csv: ") and said in err
    assert not list(Path().glob("results*"))


def test_a_table_names_its_search_and_another_architectures_or_reference_is_refused(
    searched, tmp_path, monkeypatch, capsys, caplog
):
    workdir, _ = searched
    table = workdir / "results-search-single_direction-tiny" / "search" / "search.csv"
    frame = pd.read_csv(table)
    assert set(frame["arch"]) == {"tiny"} and set(frame["study"]) == {"single_direction"}
    assert frame["reference"].nunique() == 1  # its reference by content: the same elsewhere
    other = _workdir(tmp_path)
    (other / "config.yaml").write_text(yaml.safe_dump(TWO))
    monkeypatch.chdir(other)
    # the search of another architecture, resumed from tiny's table (at 10c1e0f: taken)
    code = cli.main([*SEARCH[:4], "tiny2", *SEARCH[5:], "--resume", str(table)])
    err = capsys.readouterr().err
    assert code == 2 and "it is another search's: its arch 'tiny', not 'tiny2'" in err, err
    # the same architecture, fitted to a reference whose numbers changed since
    pd.read_csv("nads.csv").assign(acc=lambda d: d["acc"] - 1).to_csv("nads.csv", index=False)
    assert cli.main([*SEARCH, "--resume", str(table)]) == 2
    err = capsys.readouterr().err
    assert "its reference " in err and "the reference table or its entry changed since" in err
    # a table of nadpipe 0.14, which named no search: taken, and said so
    _workdir(other)
    _edited(frame, "old").to_csv("old.csv", index=False)
    far = ns.resumed(ns.prepare([], "single_direction", "tiny", ["sigma=0.25,1,4"], 1,
                                resume="old.csv"))  # fmt: skip
    assert len(far) == len(frame)
    assert "old.csv: it names no architecture, study or reference (a table of nadpipe 0.14" in (
        caplog.text
    )


def _running(pid: int, born: str) -> bool:
    """Whether the process `pid` that started at `born` (its start time, /proc/PID/stat field
    22) still runs: not ended, not a zombie, its pid not taken by another since."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z" and fields[19] == born


def _born(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_sigterm_stops_the_search_and_its_round_and_says_how_to_go_on(searched, tmp_path):
    workdir, _ = searched
    table = workdir / "results-search-single_direction-tiny" / "search" / "search.csv"
    other = _workdir(tmp_path)
    shutil.copy(table, other / "earlier.csv")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [SCRIPT, *SEARCH, "--resume", "earlier.csv"], cwd=other, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env=env, text=True, start_new_session=True,
    )  # fmt: skip
    seen, round_ = [], []
    for line in proc.stdout:
        seen.append(line)
        if re.search(r"INFO: round 3: \S*snakemake ", line):
            for _ in range(100):  # the round's Snakemake, once started
                round_ = [(c, _born(c)) for c in _children(proc.pid)]
                if round_:
                    break
                time.sleep(0.1)
            os.kill(proc.pid, signal.SIGTERM)  # nadpipe alone, as `kill` does
            break
    out = "".join(seen) + proc.communicate(timeout=180)[0]
    assert proc.returncode == 130 and "Traceback" not in out, out
    alive = [(c, Path(f"/proc/{c}/cmdline").read_text()) for c, born in round_ if _running(c, born)]
    assert round_ and not alive, (alive, out)
    assert "nadpipe search: interrupted in round 3, whose" in out
    line = re.search(r"go on, here or on another machine, with: (.*)$", out, re.M)[1]
    out_table = other / "results-search-single_direction-tiny" / "search" / "search.csv"
    assert pd.read_csv(out_table).equals(pd.read_csv(table))  # what was measured, kept
    # the line, as printed, goes on (one round: the budget of a test)
    again = subprocess.run([*shlex.split(line), "--rounds", "1"], capture_output=True,
                           text=True, cwd=other)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed from" in again.stderr and "measured in rounds 1 to 2" in again.stderr
