"""The HTML report's own pages: a landing page saying what the study is, what ran and the
headline numbers of this run (generated from the results), and each study's summary table.

The landing page is reStructuredText included by workflow/report/workflow.rst; every text goes
through `_rst` so that a character docutils reads as markup (a bar, an asterisk) stays text.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from .io import load_parquet, save_text
from .studies import REGISTRY

ABOUT = {
    "nad_pairs": "D(v1) ⊕ D(v2): channel block 1 from D(NAD i), block 2 from D(NAD j), one "
    "label; either block alone solves the task, so which one a model uses is its "
    "architecture's choice (underspecification paper, Sec. 3)",
    "cifar_nad": "binary CIFAR-10 ⊕ D(NAD k): does the model use the CIFAR image or the "
    "synthetic channel (underspecification paper, Sec. 4)",
    "poison": "CIFAR-10 whose training images carry a class code along NADs i, i+1 (NAD paper)",
    "flip": "CIFAR-10 with each channel's NAD coefficients reversed (NAD paper)",
    "single_direction": "one D(NAD k) per model: how well each NAD is learned (NAD paper)",
    "fourier": "one D(Fourier direction (a, b)) per model (NAD paper, Fig. 1)",
}


def _rst(text: object) -> str:
    """Text that docutils shows as it is."""
    out = str(text)
    for ch in ("\\", "|", "*", "`", "_"):
        out = out.replace(ch, "\\" + ch)
    return out


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}"


def _list_table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f".. list-table:: {_rst(title)}", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {_rst(row[0])}")
        lines += [f"     - {_rst(c)}" for c in row[1:]]
    return "\n".join(lines) + "\n"


def _grid(study: str, s: dict) -> str:
    if study == "nad_pairs":
        return f"NAD indices {_join(s['indices'])}, every pair (i, j)"
    if study == "fourier":
        what = "a, b = 0…size−1" if s["layout"] == "grid" else "the zero frequency centred"
        return f"{s['size']} x {s['size']} frequencies ({what})"
    if study == "flip":
        return "the original and the flipped images"
    return f"NAD indices {_join(s['indices'])}"


def _join(values) -> str:
    return ", ".join(str(v) for v in values)


def _data(s: dict) -> str:
    names = {"eps1": "ε1", "eps2": "ε2", "eps": "ε", "sigma": "σ"}
    parts = [f"{names[k]} = {s[k]}" for k in names if k in s]
    if "n_train" in s:
        parts.append(f"{s['n_train']} training and {s['n_test']} test samples")
    return ", ".join(parts) or "CIFAR-10"


def _what_ran(study: str, s: dict, df: pd.DataFrame) -> str:
    t = s["train"]
    models = df.drop_duplicates(["arch", "variant", "seed"])
    per_arch = "".join(
        f"; {arch}: {', '.join(f'{k} {v}' for k, v in over.items())}"
        for arch, over in s["train_per_arch"].items()
    )
    return _rst(
        f"{study}: {ABOUT.get(study, '')}. Architectures {_join(s['architectures'])}; "
        f"{_grid(study, s)}; seeds {_join(s['seeds'])}: {len(models)} trained models. Data: "
        f"{_data(s)}. Training: {t['epochs']} epochs, SGD, lr_max {t['lr_max']} "
        f"({t['lr_schedule']}), momentum {t['momentum']}, weight decay {t['weight_decay']}, "
        f"batch {t['batch_size']}, gradient clip {t['grad_clip']}{per_arch}."
    )


def _headline(study: str, df: pd.DataFrame) -> str:
    test = df[df["split"] == "test"]
    conditions = list(dict.fromkeys(test["condition"]))
    rows = []
    for arch, part in test.groupby("arch", sort=False):
        cells = part.groupby(["variant", "condition"])["accuracy"].mean()
        row = [arch]
        for c in conditions:
            vals = cells.xs(c, level="condition")
            row.append(f"{_pct(vals.mean())} ({_pct(vals.min())} to {_pct(vals.max())})")
        rows.append(row)
    out = _list_table(
        f"{study}: test accuracy (%), mean over cells (and seeds), with the worst and best cell",
        ["architecture", *conditions],
        rows,
    )
    notes = []
    if study == "nad_pairs":
        for arch, part in test.groupby("arch", sort=False):
            acc = part.pivot_table(
                index="variant", columns="condition", values="accuracy", dropna=False
            )
            gap = (acc["ch1_only"] - acc["ch2_only"]).abs().dropna()
            if len(gap):
                v = gap.idxmax()
                notes.append(
                    f"{arch}: the most one-sided cell is {v}: channel 1 alone "
                    f"{_pct(acc.loc[v, 'ch1_only'])} %, channel 2 alone "
                    f"{_pct(acc.loc[v, 'ch2_only'])} %"
                )
    if study == "single_direction":
        for arch, part in test.groupby("arch", sort=False):
            rho = part["nad_k"].rank().corr(part["accuracy"].rank())
            notes.append(f"{arch}: Spearman rank correlation of NAD index and accuracy {rho:.2f}")
    if df["diverged"].any():
        notes.append(
            f"{int(df.drop_duplicates(['arch', 'variant', 'seed'])['diverged'].sum())} "
            "training(s) diverged (NaN in the tables, hatched in the figures)"
        )
    return out + "".join(f"\n- {_rst(n)}" for n in notes) + ("\n" if notes else "")


def _nad_line(path: str) -> str:
    with open(path) as f:
        s = json.load(f)
    if s.get("file"):
        return f"{s['arch']}: {s['nads']} NADs read from {s['file']}"
    st, sh = s["settings"], s["split_half"]
    top10 = sh["overlap"].get("10")
    conv = (
        f"split-half top-10 overlap {top10:.2f}"
        if top10 is not None and math.isfinite(top10)
        else "split-half top-10 overlap undefined (too few networks)"
    )
    return (
        f"{s['arch']}: {st['n_networks']} random networks, {st['estimator']} estimator"
        + (f" (step {st['step']})" if st["estimator"] == "dipole" else "")
        + f", inputs {'x'.join(map(str, s['shape']))}; {conv}"
    )


def landing_page(config: dict, summaries: list[str], nads: list[str], output: str) -> None:
    """Write the landing page's reStructuredText from the run's config and results."""
    parts = [
        "nadpipe: which of several equally good solutions an architecture learns",
        "=" * 72,
        "",
        _rst(
            "Neural anisotropy directions (NADs) are the eigenvectors, by decreasing eigenvalue, "
            "of the covariance over random initialisations of a single-logit network's input "
            "sensitivity: NAD 0 is the direction an architecture picks up most easily. This "
            "report shows what the architectures below learned when several solutions were "
            "equally good, and how that follows their NADs."
        ),
        "",
        "What ran",
        "--------",
        "",
    ]
    frames = {}
    for path in summaries:
        df = load_parquet(path)
        study = df["study"].iloc[0]
        frames[study] = df
        parts += [_what_ran(study, config[study], df), ""]
    if nads:
        parts += ["**NADs**:", ""] + [f"- {_rst(_nad_line(p))}" for p in nads] + [""]
    parts += ["Headline numbers", "----------------", ""]
    for study, df in frames.items():
        parts += [_headline(study, df), ""]
    parts += [
        _rst(
            "The figures are under the categories on the left (one per study, and NADs); each "
            "study's table of test accuracies per cell is its 'summary' entry; the config the "
            "run used, every default filled in, is under Configuration."
        ),
        "",
    ]
    save_text("\n".join(parts), output)


def summary_table(df: pd.DataFrame, output: str) -> None:
    """Test accuracy (%) per architecture, cell and condition, mean over seeds (range when
    several), as an HTML table."""
    test = df[df["split"] == "test"]
    study = test["study"].iloc[0]
    keys = ["arch", *REGISTRY[study].variant.parse(test["variant"].iloc[0]).columns()]
    stats = test.groupby([*keys, "condition"], sort=False)["accuracy"].agg(["mean", "min", "max"])

    def cell(r) -> str:
        if not math.isfinite(r["mean"]):
            return "diverged"
        text = f"{100 * r['mean']:.1f}"
        return text + (
            f" [{100 * r['min']:.1f}, {100 * r['max']:.1f}]" if r["max"] > r["min"] else ""
        )

    table = stats.apply(cell, axis=1).unstack("condition")
    html = table.to_html(border=0, classes="nadpipe-summary")
    title = f"<h3>{study}: test accuracy (%) per cell, mean over seeds</h3>"
    save_text(f"<html><body>{title}{html}</body></html>\n", output)
