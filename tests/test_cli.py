"""The `nadpipe` command as a user runs it: its entry point (cli.main) in the test process for
most checks (nadpipe_here), the installed script where the process matters: its exit status
and refusals, its version, its log lines' format, the doctor's report of the machine."""

import contextlib
import io
import re
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import torch
from conftest import SCHEMA
from helpers import nadpipe_here

from nadpipe import cifar, cli
from nadpipe.config import reference_table
from nadpipe.models import build
from nadpipe.nads import compute_nads
from nadpipe.settings import ModelSpec, NadSettings, Shape

SCRIPT = shutil.which("nadpipe", path=str(Path(sys.executable).parent)) or shutil.which("nadpipe")


def nadpipe(*args, cwd=None, check=True):
    """The installed `nadpipe` command, in a process of its own."""
    assert SCRIPT, "the nadpipe command is not installed (pip install -e .)"
    res = subprocess.run([SCRIPT, *args], capture_output=True, text=True, cwd=cwd)
    if check and res.returncode != 0:
        raise AssertionError(f"nadpipe {' '.join(args)}: {res.stdout}\n{res.stderr}")
    return res


@pytest.mark.parametrize(
    "command", ["nads", "plot-nads", "compare", "versus", "doctor", "config", "search"]
)
def test_every_command_has_help_with_an_example(command):
    out = nadpipe_here(command, "--help").stdout
    assert "example:" in out and f"nadpipe {command}" in out.split("example:")[1]


def test_nads_of_a_registry_model_are_the_librarys(tmp_path):
    # 16 x 16 inputs: what is asserted holds at any size, at a quarter of the probes of 32 x 32
    res = nadpipe("nads", "--model", "lenet", "--shape", "1,16,16", "--n-networks", "24",
                  "--out", str(tmp_path / "l.npy"))  # fmt: skip
    assert res.stdout == ""  # diagnostics go to stderr, as timestamped lines with their level
    err = res.stderr
    assert "INFO: NADs: split-half subspace overlaps" in err and "k=10:" in err
    assert "undefined: each half's covariance has rank 11 < 50" in err
    # 24 networks are far from converged, and the advice names this command's flag
    assert "WARNING: NADs: split-half top-10" in err and "raise --n-networks (now 24)" in err
    assert "nads." not in err  # no config key: one vocabulary per interface
    phases = ["NADs: 24/24 net", "eigendecomposition", "split-half diagnostic", "wrote 256"]
    at = [err.index(p) for p in phases]  # every phase of the work says so, in order
    assert at == sorted(at)
    vectors = np.load(tmp_path / "l.npy")
    spec = ModelSpec("lenet", {}, Shape(1, 16, 16), 1)
    art = compute_nads(partial(build, spec), NadSettings(n_networks=24), spec.shape, progress=False)
    assert np.array_equal(vectors, art["vectors"].numpy())  # one code path: the same bytes


@pytest.mark.gpu
def test_nads_on_cuda_agree_with_the_cpu(tmp_path):
    # the command on CUDA runs (its networks are CUDA's draw: other networks than the CPU's,
    # whose top NADs two draws of 24 share little); the NADs of the same networks, the CPU's
    # moved to CUDA, agree with the CPU's
    from nadpipe.models import build
    from nadpipe.nads import compute_nads
    from nadpipe.settings import ModelSpec, NadSettings, Shape

    res = nadpipe("nads", "--model", "lenet", "--n-networks", "24", "--device", "cuda",
                  "--out", str(tmp_path / "cuda.npy"))  # fmt: skip
    assert np.load(tmp_path / "cuda.npy").shape == (1024, 1024), res.stderr
    lenet = partial(build, ModelSpec("lenet", {}, Shape(1, 32, 32), 1))
    settings = NadSettings(n_networks=24)
    cpu = compute_nads(lenet, settings, Shape(1, 32, 32), "cpu", progress=False)["vectors"]
    gpu = compute_nads(lenet, settings, Shape(1, 32, 32), "cuda", progress=False, born="cpu")
    overlap = float((cpu[:5] @ gpu["vectors"][:5].T).square().sum() / 5)
    assert overlap > 0.99  # the same leading NADs


def test_nads_of_a_user_model_on_colour_inputs(tmp_path):
    (tmp_path / "mynets.py").write_text(
        "from torch import nn\n"
        "def small_cnn(in_channels, num_classes, input_size, width=4):\n"
        "    h, w = input_size\n"
        "    return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),\n"
        "                         nn.AvgPool2d(2), nn.Flatten(),\n"
        "                         nn.Linear(width * h * w // 4, num_classes))\n"
    )
    out = tmp_path / "cnn.pt"
    res = nadpipe("nads", "--model", "mynets:small_cnn", "--kwargs", '{"width": 6}', "--shape",
                  "3,16,16", "--estimator", "gradient", "--n-networks", "30", "--out", str(out),
                  cwd=tmp_path)  # fmt: skip
    # the gradient is another object than the published NADs: said once per process (b879b52:
    # "exact"), so the installed command, in a process of its own
    assert res.stderr.count("not the published NADs") == 1, res.stderr
    art = torch.load(out, weights_only=True)
    assert art["vectors"].shape == (768, 768) and art["shape"] == [3, 16, 16]
    assert art["model"]["kwargs"] == {"width": 6} and art["provenance"]["nadpipe_version"]
    png = tmp_path / "cnn.png"
    nadpipe_here("plot-nads", str(out), "--out", str(png))
    assert mpimg.imread(png).std() > 0.05
    bad = nadpipe_here("nads", "--model", "mynets:small_cnn", "--kwargs", '{"depth": 2}',
                       "--out", str(tmp_path / "x.npy"), cwd=tmp_path, check=False)  # fmt: skip
    assert bad.returncode == 2 and "unexpected keyword argument 'depth'" in bad.stderr
    bad = nadpipe_here("nads", "--model", "lenet", "--shape", "3x32", "--out", "x.npy", check=False)
    assert bad.returncode == 2 and "--shape takes C,H,W" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n-networks", "0"], "--n-networks: 0 is less than the minimum of 22"),
        (["--n-networks", "-5"], "--n-networks: -5 is less than the minimum of 22"),
        (["--n-networks", "100000000000"], "--n-networks: 100000000000 networks x 1 point(s)"),
        (["--n-networks", "5"], "--n-networks: 5 is less than the minimum of 22 (the split-half"),
        (["--n-points", "0"], "--n-points: 0 is less than the minimum of 1"),
        (["--top-k", "0"], "--top-k: 0 is less than the minimum of 1"),
        (["--top-k", "1025"], "--top-k: 1025 is greater than the maximum of 1024"),
        (["--step", "0"], "--step: 0.0 is not a positive number"),
        (["--step", "nan"], "argument --step: nan is not a finite number"),
        (["--shape", "3,64,64"], "--top-k: the inputs 3x64x64 have 12288 coordinates"),
        (["--shape", "0,8,8"], "C, H and W must be at least 1"),
        (["--device", "cuda"], "--device asks for CUDA"),
        (["--model", "nope"], "--model: unknown model 'nope'"),
        (["--out", "x.txt"], "--out x.txt: use one of these suffixes"),
        (["--out", "/proc/nadpipe/x.npy"], "--out /proc/nadpipe/x.npy: cannot write into"),
        (["--out", "."], "--out . is a directory"),
    ],
)
def test_nads_refuses_bad_arguments_before_any_work_naming_the_flag(
    tmp_path, monkeypatch, args, message
):
    if args[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # the command's own code in this process (three of them through the installed script,
    # below): what it prints, its exit status, nothing computed and nothing written
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = cli.main(["nads", "--model", "lenet", "--n-networks", "40", "--out", "x.npy",
                             *args])  # fmt: skip
        except SystemExit as e:  # argparse's own refusals
            code = e.code
    said = err.getvalue()
    assert code == 2 and message in said, said
    assert "Traceback" not in said and "NADs:" not in said  # nothing computed
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.parametrize("args", [["--n-networks", "5"], ["--step", "nan"], ["--out", "."]])
def test_the_installed_command_refuses_them_too(tmp_path, args):
    base = ["nads", "--model", "lenet", "--n-networks", "40", "--out", "x.npy"]
    res = nadpipe(*base, *args, cwd=tmp_path, check=False)
    assert res.returncode == 2
    assert res.stderr.startswith("nadpipe nads: --") or "argument --step" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "x.npy").exists()


def test_nads_written_as_npz_and_npy_are_read_back_by_compare_and_plot_nads(tmp_path):
    for name in ("a.npz", "b.npy"):
        nadpipe_here("nads", "--model", "lenet", "--estimator", "gradient", "--n-networks", "24",
                     "--out", str(tmp_path / name))  # fmt: skip
    assert np.array_equal(np.load(tmp_path / "a.npz")["nads"], np.load(tmp_path / "b.npy"))
    out = nadpipe_here("compare", str(tmp_path / "a.npz"), str(tmp_path / "b.npy"), "-k", "10")
    assert re.search(r"^10 +1.000", out.stdout, re.M)
    nadpipe_here("plot-nads", str(tmp_path / "a.npz"), "--out", str(tmp_path / "a.png"))
    assert mpimg.imread(tmp_path / "a.png").std() > 0.05


def test_plot_nads_says_what_is_wrong_with_its_file_without_workflow_advice(tmp_path):
    missing = nadpipe_here("plot-nads", "nothere.pt", cwd=tmp_path, check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "nadpipe plot-nads: nothere.pt does not exist"
    (tmp_path / "bad.pt").write_bytes(b"not a torch file")
    bad = nadpipe_here("plot-nads", "bad.pt", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "bad.pt cannot be read" in bad.stderr
    assert "snakemake" not in bad.stderr + missing.stderr and "Traceback" not in bad.stderr
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    other = nadpipe_here("plot-nads", "other.pt", cwd=tmp_path, check=False)
    assert other.returncode == 2 and "other.pt holds no NADs" in other.stderr


def test_version():
    import nadpipe as package

    assert nadpipe("--version").stdout == f"nadpipe {package.__version__}\n"


def test_compare_prints_the_overlaps_of_a_known_pair_of_bases(tmp_path):
    q = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0].T
    mixed = np.concatenate([q[:10][::-1], q[10:]])  # the same first 10 NADs, in another order
    np.save(tmp_path / "a.npy", q)
    np.save(tmp_path / "b.npy", mixed)
    out = nadpipe_here(
        "compare", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "-k", "1", "10", "20"
    ).stdout
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isdigit()}
    assert float(lines["10"][1]) == pytest.approx(1.0) and float(lines["20"][1]) == pytest.approx(
        1.0
    )
    assert float(lines["1"][1]) < 0.01  # NAD 0 of one is NAD 9 of the other
    assert "(0.156)" in out  # chance: k / d = 10 / 64
    assert "0: 0.00" in out and "10: 1.00" not in out.split("|cos|")[1][:0]
    np.save(tmp_path / "c.npy", np.eye(32))
    bad = nadpipe_here("compare", str(tmp_path / "a.npy"), str(tmp_path / "c.npy"), check=False)
    assert bad.returncode == 2 and "rows of 64 and 32 coordinates" in bad.stderr


def test_doctor_names_what_a_bug_report_needs(tmp_path):
    out = nadpipe("doctor", "--cifar10", str(tmp_path / "none")).stdout
    assert f"torch {torch.__version__}" in out and "snakemake" in out and "Slurm:" in out
    assert (
        "CUDA" in out
        and "GPU jobs of a workflow here" in out
        and "no GPU: jobs run on the CPU" in out
    )
    assert f"CIFAR-10 under '{tmp_path / 'none'}': not found" in out
    cifar.write_cifar10_like(str(tmp_path / "c10"), n_train=10, n_test=5)
    assert "': found" in nadpipe("doctor", "--cifar10", str(tmp_path / "c10")).stdout


def test_config_prints_the_table_of_keys():
    assert nadpipe_here("config").stdout == reference_table(SCHEMA)


@pytest.mark.parametrize(
    ("args", "message"),
    [  # b879b52: exit 0 with an empty or meaningless table, or a traceback after the work
        (["compare", "a.npy", "b.npy", "-k", "0"], "-k: 0 is less than the minimum of 1"),
        (["compare", "a.npy", "b.npy", "-k", "10", "5000"],
         "-k 5000: the bases have 64 and 63 NADs, so k can be at most 63"),
        (["compare", "a.npy", "b.npy", "--first", "-1"], "--first: -1 is less than the minimum"),
        (["plot-nads", "a.npy", "--min-overlap", "nan"], "nan is not a finite number"),
        (["plot-nads", "a.npy", "--min-overlap", "2"], "2 is not between 0 and 1"),
        (["plot-nads", "a.npy", "--shape", "3,8,8"],
         "--shape 3,8,8 has 192 coordinates, but the NADs of a.npy have 64"),
        (["plot-nads", "a.npy", "--out", "a.jpg"], "--out a.jpg: use one of these suffixes"),
        (["plot-nads", "a.npy", "--out", "/proc/nadpipe/a.png"], "cannot write into /proc"),
    ],
)  # fmt: skip
def test_compare_and_plot_nads_check_every_argument_before_work(tmp_path, args, message):
    q = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0].T
    np.save(tmp_path / "a.npy", q.astype(np.float32))
    np.save(tmp_path / "b.npy", q[:63].astype(np.float32))  # a published-style basis: d - 1 rows
    res = nadpipe_here(*args, cwd=tmp_path, check=False)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not list(tmp_path.glob("*.png"))


def test_quiet_verbose_and_strict_for_scripts(tmp_path):
    base = ["nads", "--model", "lenet", "--shape", "1,16,16", "--n-networks", "24", "--out",
            str(tmp_path / "l.pt")]  # fmt: skip
    quiet = nadpipe_here("-q", *base)  # -q before the subcommand or after it
    assert quiet.stderr and all(" WARNING: " in line for line in quiet.stderr.splitlines())
    loud = nadpipe_here(*base, "-v")
    assert "DEBUG: NADs: networks 0-23 built in" in loud.stderr and "INFO: wrote" in loud.stderr
    # --strict (at the default level: no DEBUG): 24 LeNet networks are not converged; the
    # result is written all the same
    strict = nadpipe_here(*base, "--strict", check=False)
    assert strict.returncode == 3 and "--strict: the NADs are not converged" in strict.stderr
    assert "DEBUG" not in strict.stderr and "INFO: wrote" in strict.stderr
    assert (tmp_path / "l.pt").stat().st_size > 0
    shown = nadpipe_here("plot-nads", str(tmp_path / "l.pt"), "--strict", check=False)
    assert shown.returncode == 3 and (tmp_path / "l.png").exists()
    # a flat spectrum (logistic regression's sensitivity is its weights) is no failure
    flat = ["nads", "--model", "logreg", "--shape", "1,8,8", "--n-networks", "200", "--strict"]
    res = nadpipe_here(*flat, "--out", str(tmp_path / "flat.npy"))
    assert "nearly isotropic" in res.stderr
    np.save(tmp_path / "basis.npy", np.eye(64))  # no diagnostic: --strict refused before work
    res = nadpipe_here("plot-nads", str(tmp_path / "basis.npy"), "--strict", check=False)
    assert res.returncode == 2 and "holds no convergence diagnostic" in res.stderr
    assert not (tmp_path / "basis.png").exists()


def test_plot_nads_titles_an_artifact_by_its_architecture(tmp_path):
    out = tmp_path / "run 3.pt"  # b879b52: the figure said "run 3"
    nadpipe_here("nads", "--model", "lenet", "--shape", "1,16,16", "--n-networks", "24", "--out",
                 str(out))  # fmt: skip
    said = nadpipe_here("plot-nads", str(out), "--out", str(tmp_path / "f.png")).stderr
    assert "NADs of lenet: split-half top-10 overlap" in said and "run 3" not in said


def test_compare_as_json_and_with_a_published_basis_of_d_minus_one_rows(tmp_path):
    q = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0].T
    np.save(tmp_path / "a.npy", q)
    np.save(tmp_path / "p.npy", q[:63])  # the published bases leave out the last NAD
    import json

    out = json.loads(nadpipe_here("compare", "--json", str(tmp_path / "a.npy"),
                                  str(tmp_path / "p.npy")).stdout)  # fmt: skip
    assert out["rows"] == [64, 63] and out["d"] == 64 and len(out["cosine"]) == 63
    assert out["overlap"]["50"] == pytest.approx(1.0) and out["random"]["10"] == 10 / 64
    text = nadpipe_here("compare", str(tmp_path / "a.npy"), str(tmp_path / "p.npy")).stdout
    assert "B holds 63 of the 64 NADs (the first ones, indices 0 to 62 compared" in text


def test_a_builder_without_arguments_serves_nads_everywhere_and_is_told_apart(tmp_path):
    # b879b52: the command called it with in_channels and num_classes and blamed --kwargs,
    # which nobody gave; compute_nads refused the workflow's builders
    (tmp_path / "mine.py").write_text(
        "from torch import nn\n"
        "def net():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 1))\n"
        "def builder(in_channels, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 8), nn.ReLU(),\n"
        "                         nn.Linear(8, num_classes))\n"
    )
    args = ["--shape", "1,8,8", "--n-networks", "24"]
    nadpipe_here("nads", "--model", "mine:net", *args, "--out", "a.npy", cwd=tmp_path)
    nadpipe_here("nads", "--model", "mine:builder", *args, "--out", "b.npy", cwd=tmp_path)
    bad = nadpipe_here("nads", "--model", "mine:net", *args, "--kwargs", '{"width": 3}',
                       "--out", "c.npy", cwd=tmp_path, check=False)  # fmt: skip
    assert bad.returncode == 2 and "model 'mine:net' takes no arguments" in bad.stderr
    assert "net(in_channels, num_classes, **kwargs)" in bad.stderr and "--kwargs" in bad.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        import mine

        settings, shape = NadSettings(n_networks=24), Shape(1, 8, 8)
        for builder, file in ((mine.net, "a.npy"), (mine.builder, "b.npy")):  # both signatures
            art = compute_nads(builder, settings, shape, progress=False)
            assert np.array_equal(art["vectors"].numpy(), np.load(tmp_path / file))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mine", None)


def test_runs_against_without_a_page_is_refused(tmp_path):
    res = nadpipe_here("runs", str(tmp_path), "--against", str(tmp_path), cwd=tmp_path, check=False)
    assert res.returncode == 2 and "--against marks a folder on the page: give --html" in res.stderr
    res = nadpipe_here("runs", str(tmp_path), "--html", "runs.txt", cwd=tmp_path, check=False)
    assert res.returncode == 2 and "--html runs.txt: use one of these suffixes" in res.stderr


def _folder(root: Path, name: str, rows: int = 2) -> Path:
    """A results folder as a run leaves it: its resolved config and a study's summary."""
    # deferred: pandas is for these tests alone
    import pandas as pd

    folder = root / name
    (folder / "mine").mkdir(parents=True)
    (folder / "config.yaml").write_text(f"nads: {{n_networks: {10 + rows}}}\n")
    rows_ = {"study": ["mine"] * rows, "arch": ["lenet"] * rows, "variant": ["v"] * rows}
    pd.DataFrame({**rows_, "seed": list(range(rows))}).to_parquet(folder / "mine/summary.parquet")
    return folder


@pytest.mark.parametrize(
    "damage, said",
    [
        ("truncated", "mine/summary.parquet cannot be read (ArrowInvalid"),
        ("config", "config.yaml cannot be read as a config (while parsing"),
        ("list", "config.yaml holds a list, not a config's keys"),
        ("no rows", "mine/summary.parquet has no rows: its study made no cell"),
        ("no column", "mine/summary.parquet has no column 'seed': not a study's summary"),
        ("directory", "mine/summary.parquet is a directory, not a file"),
    ],
)
def test_a_damaged_results_folder_is_named_and_the_others_still_listed(damage, said, tmp_path):
    # 10c1e0f: a raw traceback without the file's name, and no folder listed at all
    good = _folder(tmp_path, "results")
    bad = _folder(tmp_path, "results-bad", rows=0 if damage == "no rows" else 2)
    summary = bad / "mine/summary.parquet"
    if damage == "truncated":
        summary.write_bytes(summary.read_bytes()[:100])
    elif damage == "config":
        (bad / "config.yaml").write_text("nads: [unclosed\n")
    elif damage == "list":
        (bad / "config.yaml").write_text("- 1\n- 2\n")
    elif damage == "no column":
        import pandas as pd  # deferred: pandas is for these tests alone

        pd.read_parquet(summary).drop(columns="seed").to_parquet(summary)
    elif damage == "directory":
        summary.unlink()
        summary.mkdir()
        (summary / "part-0.parquet").write_bytes(b"")
    res = nadpipe_here("runs", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr
    assert f"results-bad/: not read: {bad}/" in res.stdout and said in res.stdout, res.stdout
    good_row = next(line for line in res.stdout.splitlines() if line.startswith("results/ "))
    assert good_row.split()[4:7] == ["mine", "lenet", "2"], res.stdout  # the good one listed
    res = nadpipe_here("diff", str(good), str(bad), cwd=tmp_path, check=False)
    assert res.returncode == 2 and res.stderr.startswith(f"nadpipe diff: {bad}/"), res.stderr
    assert said in res.stderr and "Traceback" not in res.stderr
