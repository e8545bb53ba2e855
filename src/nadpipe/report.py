"""The HTML report's own pages: a landing page saying what the study is, what ran and the
headline numbers of this run (generated from the results), and each study's summary table.

The landing page is reStructuredText included by workflow/report/workflow.rst; every text goes
through `_rst` so that a character docutils reads as markup (a bar, an asterisk) stays text.
"""

from __future__ import annotations

import base64
import math
import os
import tempfile
from html import escape
from pathlib import Path

import pandas as pd

from . import folders
from .convergence import networks, verdict
from .estimators import ESTIMATORS
from .findings import NOT_FIT, TIE_SE
from .io import load_json, load_parquet, save_text
from .log import fold
from .studies import REGISTRY


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


def _join(values) -> str:
    return ", ".join(str(v) for v in values)


def _data(s: dict) -> str:
    names = {"eps1": "ε1", "eps2": "ε2", "eps": "ε", "sigma": "σ"}
    parts = [f"{names[k]} = {s[k]}" for k in names if k in s]
    if "n_train" in s:
        parts.append(f"{s['n_train']} training and {s['n_test']} test samples")
    return ", ".join(parts) or "CIFAR-10"


def _protocol_words(p: dict) -> str:
    data = [f"{k} {v}" for k, v in p.items() if k != "train"]
    return ", ".join(data + [f"{k} {v}" for k, v in p.get("train", {}).items()])


def _what_ran(study: str, s: dict, df: pd.DataFrame) -> str:
    t = s["train"]
    models = df.drop_duplicates(["arch", "variant", "seed"])
    per_arch = "".join(
        f"; {arch}: {', '.join(f'{k} {v}' for k, v in over.items())}"
        for arch, over in s["train_per_arch"].items()
    )
    protocols = s.get("protocols") or {}
    if protocols:
        per_arch += "; protocols " + ", ".join(
            f"{name} ({_protocol_words(p)})" if p else f"{name} (as stated)"
            for name, p in protocols.items()
        )
    return _rst(
        f"{study}: {REGISTRY[study].about}. Architectures {_join(s['architectures'])}; "
        f"{REGISTRY[study].describe_grid(s)}; seeds {_join(s['seeds'])}: {len(models)} "
        "trained models. Data: "
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
            spread = f" ({_pct(vals.min())} to {_pct(vals.max())})" if len(vals) > 1 else ""
            row.append(_pct(vals.mean()) + spread)
        rows.append(row)
    one_cell = test["variant"].nunique() == 1
    out = _list_table(
        f"{study}: test accuracy (%), "
        + (
            "mean over seeds"
            if one_cell
            else "mean over cells (and seeds), with the worst and best cell"
        ),
        ["architecture", *conditions],
        rows,
    )
    notes = REGISTRY[study].findings(df)  # what the study found, computed from its rows
    return out + "".join(f"\n- {_rst(n)}" for n in notes) + ("\n" if notes else "")


def _cautions(study: str, df: pd.DataFrame) -> list[str]:
    """What a reader of a study's numbers must know first: trainings that diverged, models
    that did not fit their training set (the warnings callout of the first page)."""
    out = []
    models = df.drop_duplicates(["arch", "variant", "seed"])
    if df["diverged"].any():
        out.append(
            f"{study}: {int(models['diverged'].sum())} training(s) diverged (NaN in the tables, "
            "hatched in red in the figures)"
        )
    if "outcome" in models and (models["outcome"] == NOT_FIT).any():
        dead = models[models["outcome"] == NOT_FIT]
        cells = ", ".join(
            f"{a} {v} (seed {s})" for a, v, s in dead[["arch", "variant", "seed"]].values
        )
        out.append(
            f"{study}: {len(dead)} model(s) did not fit their training set (training accuracy "
            f"at guessing): {cells}; their accuracies stand, their other measures are NaN, and "
            f"the figures mark them '{NOT_FIT}'"
        )
    return out


def _callout(cautions: list[str]) -> list[str]:
    """The warnings as a callout (reStructuredText's warning, styled by CALLOUT), each kind
    said once (nadpipe.log.fold)."""
    if not cautions:
        return []

    return [".. warning::", ""] + [f"   - {_rst(c)}" for c in fold(cautions)] + [""]


def _nad_line(path: str, min_overlap: float) -> tuple[str, str | None]:
    """A NAD file's line of the first page, and its warning (None: converged, or read)."""

    s = load_json(path)  # a damaged file is named, with the command that rebuilds it
    if s.get("file"):
        return f"{s['arch']}: {s['nads']} NADs read from {s['file']}", None
    st = s["settings"]
    kind, said = verdict(s, min_overlap, f"raise nads.n_networks (now {networks(s)})")
    line = (
        f"{s['arch']}: {networks(s)} random networks, {st['estimator']} estimator"
        + (f" (step {st['step']})" if "step" in ESTIMATORS[st["estimator"]].reads else "")
        + f", inputs {'x'.join(map(str, s['shape']))}; {said}"
    )
    warned = kind in ("not converged", "unknown")
    return line, f"NADs of {s['arch']}: {said}" if warned else None


def _min_overlap(config: dict, path: str) -> float:
    arch = os.path.splitext(os.path.basename(path))[0]
    own = config.get("architectures", {}).get(arch, {}).get("nads", {})
    return own.get("min_overlap_top10", config["nads"]["min_overlap_top10"])


def _figure(path: str) -> list[str]:
    """An image directive showing `path` in the page itself (a data URI: the report is one
    self-contained file), the page's full width: readable in a window 1 400 px wide."""

    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    name = os.path.basename(path)
    # the URI in lines (docutils joins them, and refuses a line over 10 000 characters)
    lines = [f"   {data[i : i + 76]}" for i in range(0, len(data), 76)]
    return [".. image:: data:image/png;base64,", *lines, f"   :alt: {name}", "   :width: 100%", ""]


def _figure_of(path: str) -> tuple[str, str, str]:
    """(study, figure, arch) of a study's figure RESULTS/STUDY/plots/FIGURE_ARCH.png."""
    study = os.path.basename(os.path.dirname(os.path.dirname(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    # the longest figure name it starts with (a study may have "accuracy" and "accuracy_x")
    figure = max((f for f in REGISTRY[study].figures if stem.startswith(f + "_")), key=len)
    return study, figure, stem[len(figure) + 1 :]


def _caption(path: str) -> str:
    """The figure's caption, as its study declares it (studies.Figure), for its architecture."""
    study, figure, arch = _figure_of(path)
    return REGISTRY[study].figures[figure].caption.replace("{arch}", arch)


def _headline_first(figures: list[str], frames: dict) -> list[str]:
    """The headline figures, the architecture that carries the study's finding first
    (Study.headline_order)."""
    if not figures:
        return figures
    study = _figure_of(figures[0])[0]
    if study not in frames:
        return figures
    by_arch = {_figure_of(p)[2]: p for p in figures}
    return [by_arch[a] for a in REGISTRY[study].headline_order(frames[study], list(by_arch))]


def landing_page(
    config: dict,
    summaries: list[str],
    nads: list[str],
    output: str,
    figures: list[str] = (),
) -> None:
    """Write the landing page's reStructuredText from the run's config and results, with the
    headline `figures` (grid.Plan.headline_figures) under the headline numbers. It reads this
    run's files alone: the same run gives the same page whatever lies beside its folder."""
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
    ]
    frames = {}
    for path in summaries:
        df = load_parquet(path)
        frames[df["study"].iloc[0]] = df
    figures = _headline_first(list(figures), frames)
    if figures:  # the page leads with the headline figure, full width, under its caption
        parts += [_caption(figures[0]), ""] + _figure(figures[0])
    lines = [_nad_line(p, _min_overlap(config, p)) for p in nads]
    cautions = [w for _, w in lines if w] + [
        c for study, df in frames.items() for c in _cautions(study, df)
    ]
    parts += _callout(cautions)  # what a reader must know before the numbers
    parts += ["What ran", "--------", ""]
    for study, df in frames.items():
        parts += [_what_ran(study, config[study], df), ""]
    if lines:
        parts += ["**NADs**:", ""] + [f"- {_rst(line)}" for line, _ in lines] + [""]
    parts += ["Headline numbers", "----------------", ""]
    for study, df in frames.items():
        parts += [_headline(study, df), ""]
    for path in figures[1:]:
        parts += [_caption(path), ""] + _figure(path)
    parts += [
        _rst(
            "The figures are under the categories on the left (one per study, and NADs); each "
            "study's table of test accuracies per cell is its 'summary' entry; the config the "
            "run used, every default filled in, is under Configuration."
        ),
        "",
    ]
    # Snakemake's report centres its first page in a box of the window's height: a page taller
    # than the window would lose its top, out of reach of the scroll bar
    parts += [".. raw:: html", "", f"   <style>{TOP_ALIGNED} {CALLOUT}</style>", ""]
    save_text("\n".join(parts), output)


# and its text column (Tailwind's max-w-lg, 512 px) takes the width beside the workflow's graph,
# so that the headline figure at the page's full width is readable in a window 1 400 px wide
TOP_ALIGNED = (
    ".h-screen.items-center { align-items: safe center; } "
    ".prose.max-w-lg { max-width: none; flex: 1 1 0%; min-width: 0; }"
)


# the warnings callout: docutils' admonition, which the report's own styles leave plain
CALLOUT = (
    ".admonition.warning { border-left: 4px solid #d97706; background: #fff7e6; "
    "padding: 0.4em 1em; margin: 1em 0; } "
    ".admonition.warning .admonition-title { font-weight: 600; color: #92400e; margin: 0; }"
)


def runs_page(directory: str, output: str, against: str | None = None, most: int = 6) -> None:
    """Every results folder in `directory` side by side (nadpipe.folders), for `nadpipe runs
    --html`, never by a run; with `against`, that one marked, and the cells of the `most`
    newest others against its (nadpipe.folders.diff: the cells that changed, the figure)."""
    where = Path(directory).resolve()
    here = Path(against).resolve() if against else None
    found = [r for r in folders.side_by_side(where) if "unreadable" not in r]  # said by the text
    head = ["folder", "made", "nadpipe", "studies", "cells", "keys that differ", "what it found"]
    rows = []
    for r in found:
        mine = here is not None and r["folder"] == here.name
        keys = "<br>".join(f"{escape(k)}: {escape(repr(v))}" for k, v in r["differs"].items())
        said = "<br>".join(escape(f) for f in r["findings"]) or "(no finding stated)"
        cells = [
            f"<b>{escape(r['folder'])}/</b> (compared)" if mine else f"{escape(r['folder'])}/",
            r["made"], ", ".join(r["versions"]) or "?", ", ".join(r["studies"]),
            str(r["cells"]), keys or "(none)", said,
        ]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts = [
        f"<h3>Every results folder in {escape(str(where))}, side by side</h3>",
        '<table class="nadpipe-summary"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>",
    ]
    others = [] if here is None else [r for r in found if r["folder"] != here.name]
    for r in sorted(others, key=lambda r: r["made"])[::-1][:most]:
        other = where / r["folder"]
        paired = folders.cell_pairs(here, other)  # read once: the text and the figure
        if not paired:
            continue
        lines = folders.diff_text(folders.diff(here, other, paired)).splitlines()
        parts.append(f"<h3>{escape(here.name)}/ -> {escape(r['folder'])}/</h3>")
        parts.append("<pre>" + escape("\n".join(lines[1:])) + "</pre>")
        with tempfile.TemporaryDirectory() as tmp:
            change = os.path.join(tmp, "change.png")
            for path in folders.diff_figures(here, other, change, paired):
                data = base64.b64encode(Path(path).read_bytes()).decode()
                parts.append(f'<img src="data:image/png;base64,{data}" style="max-width:100%">')
    style = TABLE_STYLE + (
        " .nadpipe-summary td { vertical-align: top; white-space: normal; text-align: left; }"
        " pre { white-space: pre-wrap; }"
    )
    save_text(
        f"<html><head><style>{style}</style></head><body>{''.join(parts)}</body></html>\n",
        output,
    )


def config_page(text: str, output: str) -> None:
    """The config (YAML `text`) as an HTML page the report shows in place (a .yaml would be a
    download)."""

    title = (
        "<h3>The config this run used, every default filled in (config.yaml in its results)</h3>"
    )
    style = "pre { font-size: 13px; line-height: 1.35; white-space: pre-wrap; }"
    save_text(
        f"<html><head><style>{style}</style></head><body>{title}<pre>{escape(text)}</pre>"
        "</body></html>\n",
        output,
    )


def resolved_config_job(config: dict, yaml_out: str, page_out: str) -> None:
    """The config the run used, every default filled in: as YAML, and as a page the report
    shows."""
    # deferred: it loads yaml, which importing report does not
    import yaml

    text = yaml.safe_dump(config, sort_keys=False)
    save_text(text, yaml_out)
    config_page(text, page_out)


def summary_table_job(summary: str, output: str) -> None:
    """`summary_table` of a study's summary.parquet."""
    summary_table(load_parquet(summary), output)


def summary_table(df: pd.DataFrame, output: str) -> None:
    """Test accuracy (%) per architecture, cell and condition, mean over seeds (range when
    several), as an HTML table."""
    test = df[df["split"] == "test"]
    study = test["study"].iloc[0]
    keys = ["arch", "protocol", *REGISTRY[study].variant.COLUMNS]
    keys = [k for k in keys if k in test and test[k].notna().any()]  # protocol: null without
    stats = test.groupby([*keys, "condition"], sort=False, dropna=False)["accuracy"].agg(
        ["mean", "min", "max"]
    )

    def cell(r) -> str:
        if not math.isfinite(r["mean"]):
            return "diverged"
        text = f"{100 * r['mean']:.1f}"
        return text + (
            f" [{100 * r['min']:.1f}, {100 * r['max']:.1f}]" if r["max"] > r["min"] else ""
        )

    table = stats.apply(cell, axis=1).unstack("condition")
    title = f"<h3>{study}: test accuracy (%) per cell, mean over seeds</h3>"
    extra = REGISTRY[study].cell_columns(df)
    if extra is not None and "protocol" not in keys:  # what each cell shows, beside it
        table = table.join(extra, on=list(extra.index.names))
        title = (
            f"<h3>{study}: test accuracy (%) per cell and condition, mean over seeds "
            f"[range], with both channels ± {TIE_SE} standard errors (the seeds' spread, or "
            f"the binomial error of all their test samples where larger); the reliance "
            f"angle of its learned seeds (± {TIE_SE} standard errors of their mean [range]) "
            f"and what the cell shows</h3>"
        )
    # one header row, every row with its whole key: a table one reads across
    html = table.reset_index().to_html(border=0, classes="nadpipe-summary", index=False)
    save_text(
        f"<html><head><style>{TABLE_STYLE}</style></head><body>{title}{html}</body></html>\n",
        output,
    )


# a table one reads across: header kept in view, rows banded, numbers aligned
TABLE_STYLE = (
    "body { font: 14px/1.45 system-ui, sans-serif; margin: 12px; color: #222; } "
    "h3 { font-size: 15px; font-weight: 600; max-width: 60em; } "
    "table.nadpipe-summary { border-collapse: collapse; font-variant-numeric: tabular-nums; } "
    ".nadpipe-summary th, .nadpipe-summary td { padding: 4px 10px; text-align: right; "
    "border-bottom: 1px solid #e2e2e2; white-space: nowrap; } "
    ".nadpipe-summary thead th { position: sticky; top: 0; background: #f0f2f5; "
    "border-bottom: 2px solid #bbb; } "
    ".nadpipe-summary tbody tr:nth-child(even) td { background: #f7f8fa; } "
    ".nadpipe-summary tbody tr:hover td { background: #eef4ff; } "
    ".nadpipe-summary td:last-child, .nadpipe-summary td:first-child, "
    ".nadpipe-summary th:first-child { text-align: left; }"
)
