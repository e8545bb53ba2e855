"""Writes the documentation's generated pages: every config key (keys.md), every bad input
with what it says (bad-inputs.md), from the schema, nadpipe.settings and by running each input,
and every column of the result tables (summary.md, from nadpipe.row); and the generated blocks
of hand-written pages (the registry models' table in nad-paper.md, from
nadpipe.models.DIFFERENCES).

    python3 docs/generate.py          # rewrite the pages
    python3 docs/generate.py --check  # exit 1 when a page is not what it would write

tests/test_docs.py checks that the committed pages are up to date and that the site builds.
"""

from __future__ import annotations

import os

# the pages show a machine without CUDA (their `--device cuda` entry), wherever they are made
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import contextlib  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
STUDY = "/home/you/study"  # the working directory as the pages show it

USER_NETS = (DOCS / "user_nets.py").read_text()  # the models the catalogue runs


PAIRS = ["nad_pairs"]
MINE = {"nad_pairs": {"architectures": ["mine"]}}

# faulty reference tables (single_direction.references): name -> (what, rows, settings)
REFERENCES = {
    "text": ("text in the accuracy column", {"index": [0, 1000], "acc": [99.5, "n/a"]}, {}),
    "empty": ("an empty index cell", {"index": [0, None], "acc": [99.5, 60]}, {}),
    "repeated": ("a repeated index", {"index": [0, 1000, 0], "acc": [99.5, 60, 98]}, {}),
    "fractional": ("a fractional index", {"index": [0, 999.5], "acc": [99.5, 60]}, {}),
    "over": ("an accuracy over 100", {"index": [0, 1000], "acc": [99.5, 150]}, {}),
    "eig": ("an eigenvalue column named as the accuracies",
            {"index": [0, 1000], "acc": [0.14, 0.001]}, {}),
    "norows": ("a table without rows", {"index": [], "acc": []}, {}),
    "apart": ("no cell in common with the study", {"index": [3, 4], "acc": [99.5, 60]}, {}),
    "mixed": ("fractions among percents", {"index": [0, 1000], "acc": [99.5, 0.6]}, {}),
    "headerless": ("a table without a header line", {"0": [1000], "99.5": [60]}, {}),
    "nocolumn": ("a table without the named column",
                 {"index": [0, 1000], "accuracy": [99.5, 60]}, {}),
    "offset": ("`offset` on a single_direction reference",
               {"index": [0, 1000], "acc": [99.5, 60]}, {"offset": -8}),
}  # fmt: skip

# (what, change merged over the default config.yaml): each stops before any job
CONFIG = [
    ("a typo in a key", {"nad_pairs": {"epsilon1": 1.0}}),
    ("unknown architecture", {"nad_pairs": {"architectures": ["mlp", "resnet"]}}),
    ("an architecture name no file path can hold", {"nad_pairs": {"architectures": ["a/b"]}}),
    ("a study of one's own whose module is not named", {"toy": {"enabled": True}}),
    ("a model kwarg of another kind",
     {"architectures": {"m": {"model": "mlp", "kwargs": {"hidden": 32}}},
      "nad_pairs": {"architectures": ["m"]}}),
    ("a GPU lock folder that cannot be written", {"gpus": {"lock_dir": "/dev/null/slots"}}),
    ("`.nan`, `.inf` where a number is expected", {"nad_pairs": {"eps1": float("nan")}}),
    ("a whole-number float where an integer is expected",
     {"nad_pairs": {"train": {"epochs": 10.0}}}),
    ("a number written as text", {"nad_pairs": {"train": {"weight_decay": "1e-5"}}}),
    ("ε or σ ≤ 0", {"nad_pairs": {"eps1": 0}}),
    ("empty or duplicate lists", {"nad_pairs": {"indices": [0, 5, 5]}}),
    ("a key that takes one of two kinds of values", {"gpus": {"slots": -1}}),
    ("the same, a list of pairs", {"analysis": {"cross_section": {"pairs": [[1]]}}}),
    ("too few networks for the split-half diagnostic", {"nads": {"n_networks": 2}}),
    ("NAD index past the last NAD", {"nad_pairs": {"indices": [0, 1024]}}),
    ("poisoned index past the last NAD but one",
     {"nad_pairs": {"enabled": False}, "poison": {"enabled": True, "indices": [1023]},
      "cifar10": {"root": "cifar"}}),  # fmt: skip
    ("a Fourier grid larger than the image",
     {"fourier": {"enabled": True, "architectures": ["lenet"], "size": 33}}),
    ("`nads_from` chains",
     {"architectures": {"lenet": {"nads_from": "mlp"}, "mlp": {"nads_from": "lenet_nopool"}}}),
    ("NAD settings on an architecture that takes its NADs from another",
     {"architectures": {"lenet": {"nads_from": "mlp", "nads": {"n_networks": 50}}}}),
    ("user model that does not import", {"architectures": {"mine": {"model": "missing_pkg:net"}}}),
    ("user model that returns a tuple",
     {"architectures": {"mine": {"model": "user_nets:tuple_out"}}}),
    ("user model that raises inside forward",
     {"architectures": {"mine": {"model": "user_nets:raises_in_forward"}}}),
    ("user model that needs other input channels",
     {"architectures": {"mine": {"model": "user_nets:rgb_only"}}}),
    ("user builder that returns no module",
     {"architectures": {"mine": {"model": "user_nets:not_a_module"}}}),
    ("user builder without parameters (the Python API's kind)",
     {"architectures": {"mine": {"model": "user_nets:one_logit"}}}),
    ("user model with no trainable parameter",
     {"architectures": {"mine": {"model": "user_nets:frozen"}}}),
    ("user model whose outputs are not finite",
     {"architectures": {"mine": {"model": "user_nets:not_finite"}}}),
    ("model kwargs the builder does not take",
     {"architectures": {"mine": {"model": "mlp", "kwargs": {"depth": 3}}}}),
    ("a kwargs value the builder fails on",
     {"architectures": {"mine": {"model": "user_nets:widths", "kwargs": {"width": 0}}}}),
    ("an input shape above 4 096 coordinates without `top_k`",
     {"architectures": {"lenet": {"shape": [3, 64, 64]}},
      "nad_pairs": {"architectures": ["lenet"]}}),
    ("a model that cannot take the shape",
     {"architectures": {"vgg11": {"shape": [1, 28, 28]}},
      "nad_pairs": {"architectures": ["vgg11"]}}),
    ("a NAD file with NADs as columns", {"architectures": {"lenet": {"nads_file": "cols.npy"}}}),
    ("a NAD file whose rows are not orthonormal",
     {"architectures": {"lenet": {"nads_file": "scaled.npy"}}}),
    ("a key that takes one word beside true and false", {"nads": {"grouped": "yes"}}),
    ("precision fp32 beside the older bf16 switch",
     {"nad_pairs": {"train": {"precision": "fp32", "bf16": True}}}),
    ("a NAD index the NAD file lacks (a published basis holds 1023)",
     {"architectures": {"lenet": {"nads_file": "published.npy"}},
      "nad_pairs": {"architectures": ["lenet"], "indices": [0, 1023]}}),
    ("an MLP kwarg list of another kind (an empty list passes: a linear model)",
     {"architectures": {"m": {"model": "mlp", "kwargs": {"hidden": ["wide"]}}},
      "nad_pairs": {"architectures": ["m"]}}),
    ("a NAD band past the last NAD",
     {"analysis": {"nad_bands": {"enabled": True, "bands": [[0, 9], [10, 1024]]}}}),
    ("cross-section pair not in the grid",
     {"analysis": {"cross_section": {"pairs": [[0, 10], [10, 11]]}}}),
    *[(f"a reference table: {what}",
       {"single_direction": {"enabled": True, "architectures": ["lenet"], "indices": [0, 1000],
                             "references": {"lenet": {"file": f"{name}.csv", "column": "acc",
                                                      **extra}}}})
      for name, (what, _, extra) in REFERENCES.items()],
    ("a CIFAR study enabled, CIFAR-10 missing",
     {"nad_pairs": {"enabled": False}, "cifar_nad": {"enabled": True}}),
]  # fmt: skip
for _, change in CONFIG:  # the user models run in the pair study
    if "mine" in change.get("architectures", {}):
        change.setdefault("nad_pairs", {})["architectures"] = ["mine"]

WARNINGS = [
    ("more analysis points than test points",
     {"analysis": {"n_points": 500}, "nad_pairs": {"n_test": 100}}),
    ("NAD index at or past the covariance rank",
     {"nads": {"n_networks": 300}, "nad_pairs": {"indices": [0, 299, 1000]}}),
    ("per-architecture training for an architecture not in the study",
     {"nad_pairs": {"train_per_arch": {"resnet18": {"epochs": 3}}}}),
    ("a dipole setting with the gradient estimator",
     {"nads": {"estimator": "gradient", "step": 10.0}}),
    ("grouped networks with the gradient estimator",
     {"nads": {"estimator": "gradient", "grouped": True}}),
]  # fmt: skip

# `nadpipe nads` arguments, each refused before any work
COMMAND = [
    ("too few networks", ["--n-networks", "5"]),
    ("no evaluation point", ["--n-points", "0"]),
    ("no NAD asked for", ["--top-k", "0"]),
    ("more NADs than coordinates", ["--top-k", "2000"]),
    ("a step of 0", ["--step", "0"]),
    ("a step that is not a number", ["--step", "nan"]),
    ("an input larger than a full covariance allows", ["--shape", "3,64,64"]),
    ("an unknown model", ["--model", "resnet"]),
    ("kwargs the builder does not take", ["--kwargs", '{"depth": 2}']),
    ("CUDA on a machine without it", ["--device", "cuda"]),
    ("an output of another kind", ["--out", "lenet.txt"]),
    ("an output nobody can write", ["--out", "/proc/lenet.npy"]),
    ("a shape that starts with '-'", ["--shape", "-1,32,32"]),
]


def file_messages() -> list[tuple[str, str]]:
    """(what, message) of inputs that are files or other commands' arguments."""
    from nadpipe import cli
    from nadpipe.config import ConfigError, check_yaml

    here, out = _workdir(), []
    path = Path(here, "config.yaml")
    path.write_text("nads: {n_networks: 40}\nnad_pairs: {seeds: [0]}\nnads: {seed: 1}\n")
    try:
        with contextlib.chdir(here):  # named as the user names it
            check_yaml("config.yaml")
    except ConfigError as e:
        out.append(("a key given twice in a config file", _clean(str(e), here)))
    for what, argv in (
        ("`nadpipe versus` given the reference first", ["versus", "nads.csv", "summary.parquet"]),
    ):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            assert cli.main(argv) == 2, f"not refused: {what}"
        out.append((what, _clean(err.getvalue().strip().splitlines()[-1], here)))
    return out


def _search_table(here: str) -> pd.DataFrame:
    """A finished search's table over sigma, of lenet's single_direction fitted to nads.csv."""
    from nadpipe import search_table

    claim = search_table.claim({"single_direction": {"references": {"lenet": {
        "file": "nads.csv", "column": "acc"}}}}, "single_direction", "lenet")  # fmt: skip
    rows = [{"round": 1, "protocol": f"sigma{s}", "sigma": s, "cells": 6, "mean_abs_diff": d,
             "max_abs_diff": 2 * d, "pearson": 0.9, "noise": 0.4, "learned": True,
             "tied": False} for s, d in ((1, 2.5), (4, 3.0))]  # fmt: skip
    return pd.DataFrame(rows).assign(**claim)


def read_back_messages() -> list[tuple[str, str]]:
    """(what, message) of files nadpipe wrote that come back damaged or of another run."""
    from nadpipe import cli, search_table
    from nadpipe.cli.common import dotted_config

    here, out = _workdir(), []
    Path(here, "nads.csv").write_text("index,acc\n0,90\n")
    with contextlib.chdir(here):  # the reference by content, as a search reads it there
        table = _search_table(here)
        lenet = {k: table[k].iloc[0] for k in search_table.CLAIM}
        for what, frame, claim in (
            ("`nadpipe search --arch mlp --resume` given LeNet's table", table,
             {**lenet, "arch": "mlp"}),
            ("a search table with a negative fit", table.assign(mean_abs_diff=[-5.0, 3.0]), lenet),
            ("a search table with a protocol twice", pd.concat([table, table.iloc[[0]]]), lenet),
        ):  # fmt: skip
            try:
                search_table.check(frame, claim, ["sigma"])
            except search_table.TableError as e:
                out.append((what, _clean(f"nadpipe search: --resume search.csv: {e}", here)))
            else:
                raise AssertionError(f"accepted: {what}")
    folder = Path(here, "results-old")
    (folder / "nad_pairs").mkdir(parents=True)
    (folder / "config.yaml").write_text("nads: {n_networks: 40}\n")
    (folder / "nad_pairs/summary.parquet").write_bytes(b"PAR1 cut short")
    with contextlib.chdir(here):
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            cli.main(["runs", "."])
    out.append(("`nadpipe runs` beside a truncated summary (the other folders still listed)",
                _clean(said.getvalue().strip().splitlines()[-1], here)))  # fmt: skip
    dotted = dotted_config(["--config", "nads.n_networks=50"])
    out.append(("a dotted key: `nadpipe search --snakemake '--config nads.n_networks=50'`",
                f"nadpipe search: --snakemake: {dotted}"))  # fmt: skip
    return out


def _merged(change: dict) -> dict:
    from snakemake.utils import update_config

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(cfg, change)
    return cfg


def _clean(text: str, here: str) -> str:
    """A message as the page shows it: the working directory as STUDY, torch's own wording and
    this machine's versions left out (they change with torch, not with nadpipe)."""
    import torch

    text = text.replace(here, STUDY)
    shape = r"(inside forward \(eval mode\) on an input of shape \([\d, ]+\)): .*"
    text = re.sub(shape, r"\1: …", text)
    text = text.replace(torch.__version__, "X").replace(str(torch.version.cuda), "Y")
    return " ".join(text.split()).replace("|", "\\|")


def _workdir() -> str:
    here = tempfile.mkdtemp(prefix="nadpipe-docs-")
    Path(here, "user_nets.py").write_text(USER_NETS)
    q = np.linalg.qr(np.random.default_rng(0).standard_normal((1024, 1024)))[0]
    np.save(Path(here, "cols.npy"), q[:, :10])
    np.save(Path(here, "scaled.npy"), 3 * q.T[:10])
    np.save(Path(here, "published.npy"), q.T[:1023].astype(np.float32))  # the authors' shape
    for name, (_, rows, _) in REFERENCES.items():
        pd.DataFrame(rows).to_csv(Path(here, f"{name}.csv"), index=False)
    return here


def config_messages() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(what, message) of each bad config, and of each setting that is warned about."""
    from nadpipe import config as nc

    here = _workdir()
    old, errors, warnings = os.getcwd(), [], []
    os.chdir(here)
    sys.path.insert(0, here)
    try:
        for what, change in CONFIG:
            try:
                nc.load_config(_merged(change), SCHEMA)
            except nc.ConfigError as e:
                errors.append((what, _clean(str(e).removeprefix("invalid config:"), here)))
            else:
                raise AssertionError(f"accepted: {what}")
        for what, change in WARNINGS:
            found = nc.load_config(_merged(change), SCHEMA)[1]
            assert found, f"no warning: {what}"
            warnings.append((what, _clean(found[0], here)))
    finally:
        os.chdir(old)
        sys.path.remove(here)
    return errors, warnings


def command_messages() -> list[tuple[str, str]]:
    from nadpipe import cli

    out = []
    for what, args in COMMAND:
        argv = ["nads", "--model", "lenet", "--n-networks", "40", "--out", "lenet.npy", *args]
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            code = cli.main(argv)
            assert code == 2, f"not refused: {what}"
        line = err.getvalue().strip().splitlines()[-1]
        out.append((f"{what}: `{' '.join(args)}`", _clean(line, os.getcwd())))
    return out


def _table(rows: list[tuple[str, str]], head: str) -> str:
    lines = [f"| {head} | message |", "| --- | --- |"]
    return "\n".join(lines + [f"| {what} | `{message}` |" for what, message in rows]) + "\n"


def keys_page() -> str:
    from nadpipe.config import reference_table

    return (
        "# Every config key\n\n"
        "`config.yaml` states only what makes the default study CPU-sized; every other key takes "
        "its default from `src/nadpipe/settings.py` (the papers' values), the one place defaults "
        "live. `config.yaml` in the run's results folder (`results/`, or `results-NAME/` for "
        "`--configfile NAME.yaml`: the key `results`) holds the config a run used, every "
        "default filled in. A file "
        "given with `--configfile` is merged over `config.yaml` (mappings key by key, lists "
        "replace). From the command line, `--config` sets any key, a nested one as YAML: "
        "`snakemake --cores all --config 'nads={n_networks: 300}' 'nad_pairs={seeds: [0, 1, "
        "2]}'` (merged into the files' config key by key, typed and checked as in a file; "
        "Snakemake takes no dotted `nads.n_networks=300`). This page is generated from the "
        "schema (`workflow/schemas/config.schema.yaml`, "
        "the meanings) and the settings (the defaults) by `python3 docs/generate.py`; "
        "`nadpipe config` prints the same table.\n\n" + reference_table(SCHEMA)
    )


def bad_inputs_page() -> str:
    errors, warnings = config_messages()
    return (
        "# Every bad input and what it says\n\n"
        "Generated by `python3 docs/generate.py`, which runs each input and writes what nadpipe "
        "said (the working directory shown as `/home/you/study`, torch's own wording as …).\n\n"
        "## A config that cannot mean anything\n\n"
        "It stops the run before any job, naming the key:\n\n"
        + _table(errors, "bad input")
        + "\nA YAML syntax error in `config.yaml` names the file, the line and the column "
        "(`config.yaml, line 3, column 8: not valid YAML: expected ',' or ']', …`). One in a "
        "file given with `--configfile` gets Snakemake's own message, which names neither: "
        "Snakemake reads those files in its command line, before any workflow code runs.\n\n"
        "## Settings that change nothing\n\n"
        "They are warned about at the start of the run and again at its end:\n\n"
        + _table(warnings, "given")
        + "\n## Files and other commands\n\n"
        + _table(file_messages(), "input")
        + "\n## Files nadpipe wrote, read back\n\n"
        "A file a run or a search wrote is checked against what it claims to be before it is "
        "used; one that fails is named:\n\n"
        + _table(read_back_messages(), "input")
        + "\nA kept NAD chunk of another range or run, truncated, garbage, of another shape or "
        "not finite is dropped and computed again, its path said in the job's log and on the "
        "console. A line of the cost records or of the cached probes that is none is named, "
        "left out, and its model measured again. A `NADPIPE_RUN` left in the environment by "
        "another run is not this run's: the run sets its own (one that is not JSON is named). "
        "A dotted key given to Snakemake itself (`snakemake --config nads.n_networks=50`) gets "
        'Snakemake\'s words ("Config entry must start with a valid identifier"): it reads '
        "`--config` before any workflow code runs. Give the key nested, in YAML: "
        "`--config 'nads={n_networks: 50}'`; the other keys of `nads` stay.\n"
        + "\nA reference of several protocols given to `nadpipe versus` is refused until "
        "`--protocol-b` names one; a column that mixes fractions and percents, a table without "
        "a header line or without the named column: above, with the config's references.\n"
        + "\n## `nadpipe nads` arguments\n\n"
        "Every argument is checked before any work, the message naming the flag (exit status "
        "2):\n\n"
        + _table(command_messages(), "argument")
        + "\nWhat a run says when something goes wrong while it runs (a corrupt or replaced "
        "file, a killed run, a second run): [what you can trust](trust.md).\n"
    )


def summary_page() -> str:
    """Every column of summary.parquet and runs.parquet (nadpipe.row), the settings' meanings
    from the schema."""
    from nadpipe import row
    from nadpipe.config import key_rows
    from nadpipe.studies import REGISTRY

    meaning = {k: m for k, _, m in key_rows(SCHEMA)}
    keys = {k.removeprefix("STUDY."): m for k, m in meaning.items()}
    studies = {
        name: (
            dict(entry.variant.COLUMNS),
            {k: meaning.get(f"{name}.{k}", "") for k in entry.data_keys
             if k not in ("n_train", "n_test")},
        )
        for name, entry in REGISTRY.items()
    }  # fmt: skip
    return row.markdown(studies, keys)


PAGES = {"keys.md": keys_page, "bad-inputs.md": bad_inputs_page, "summary.md": summary_page}


def models_table() -> str:
    """The registry models' differences from the NAD code's (nadpipe.models.DIFFERENCES)."""
    from nadpipe.models import DIFFERENCES

    rows = [f"| `{name}` | {text} |" for name, text in DIFFERENCES.items()]
    return "\n".join(["| model | difference from the NAD code |", "| --- | --- |", *rows])


# blocks generated inside hand-written pages: (page, name) -> the block's text, between
# <!-- generated: NAME --> and <!-- end generated -->
BLOCKS = {("nad-paper.md", "models.DIFFERENCES"): models_table}


def with_blocks(name: str, text: str) -> str:
    """The page `name` with its generated blocks rewritten."""
    for (page, block), make in BLOCKS.items():
        if page != name:
            continue
        start, end = f"<!-- generated: {block} -->", "<!-- end generated -->"
        found = re.search(re.escape(start) + r"\n.*?" + re.escape(end), text, re.S)
        if found is None:
            raise SystemExit(f"docs/{page}: no block {start} ... {end}")
        text = text[: found.start()] + f"{start}\n{make()}\n{end}" + text[found.end() :]
    return text


def main(argv: list[str]) -> int:
    stale = []
    for name, page in PAGES.items():
        text = page()
        path = DOCS / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in sorted({page for page, _ in BLOCKS}):
        path = DOCS / name
        text = with_blocks(name, path.read_text())
        if "--check" in argv:
            if path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; regenerate with: python3 docs/generate.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
