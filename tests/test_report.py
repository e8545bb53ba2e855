"""The report's headline findings, computed from the rows: cells over their seeds, cells at
the edge of learning called out (one seed at the edge of learning is a coin, not a finding)."""

import re

import pandas as pd

from nadpipe.findings import cell_verdicts, pair_findings


def _rows(cells: dict) -> pd.DataFrame:
    """(i, j) -> per seed (outcome, reliance angle) as summary rows of LeNet."""
    rows = []
    for (i, j), seeds in cells.items():
        for seed, (outcome, angle) in enumerate(seeds):
            for split in ("train", "test"):
                rows.append({"arch": "lenet", "nad_i": i, "nad_j": j, "seed": seed,
                             "split": split, "condition": "both", "outcome": outcome,
                             "accuracy": 0.5 if outcome != "fit" else 0.99,
                             "reliance_deg": angle if outcome == "fit" else float("nan"),
                             "eps1": 1.0, "eps2": 0.5})  # fmt: skip
    return pd.DataFrame(rows)


L, D = "fit", "did not fit"
CELLS = {
    (0, 10): [(L, 10.0), (L, 20.0), (L, 5.0)],  # channel 1 = NAD 0, the lower: every seed
    (10, 0): [(L, 80.0), (L, 85.0), (L, 70.0)],  # channel 2 = NAD 0: every seed
    (0, 1000): [(L, 10.0), (D, 0.0), (L, 20.0)],  # one seed did not fit: the edge
    (1000, 10): [(L, 30.0), (L, 60.0), (L, 80.0)],  # the seeds relied on different channels
    (500, 1000): [(D, 0.0), (D, 0.0), (D, 0.0)],  # nobody learned
    (100, 0): [(L, 10.0), (L, 20.0), (L, 30.0)],  # every seed on NAD 100: the higher
    (0, 0): [(L, 45.5), (L, 40.0), (L, 50.0)],
}


def test_each_cell_is_judged_over_its_seeds():
    v = cell_verdicts(_rows(CELLS)).set_index(["nad_i", "nad_j"])
    assert v.loc[(0, 10), "verdict"] == v.loc[(10, 0), "verdict"] == "lower"
    assert v.loc[(0, 1000), "verdict"] == v.loc[(1000, 10), "verdict"] == "edge"
    assert v.loc[(500, 1000), "verdict"] == "not learned"
    assert v.loc[(100, 0), "verdict"] == "higher" and v.loc[(0, 0), "verdict"] == "same"
    assert v.loc[(0, 1000), "learned"] == 2 and (v["seeds"] == 3).all()


def test_a_summary_of_an_earlier_version_says_the_same_in_its_words():
    # before 0.12.0 the summary's outcome said `learned` for a model that fit its training
    # set, the findings' word for test accuracy clearly above chance: read as fit
    rows = _rows(CELLS)
    old = rows.assign(outcome=rows["outcome"].map({L: "learned", D: "did not learn"}))
    pd.testing.assert_frame_equal(cell_verdicts(old), cell_verdicts(rows))


def test_the_headline_counts_cells_and_names_those_at_the_edge():
    (line,) = pair_findings(_rows(CELLS))
    said = ("lenet (3 seeds per cell): relied on the channel of the lower NAD index in 2 of 6 "
            "cells with i ≠ j (every seed, each within 20.0° of that channel alone); relied on "
            "the channel of the higher NAD index in 1 of 6 cells with i ≠ j (every seed, each "
            "within 30.0° of that channel alone); at the edge of learning (its seeds disagree) "
            "in 2: (0, 1000), (1000, 10); not learned by any seed in 1 (test accuracy not "
            "clearly above chance)")  # fmt: skip
    assert line == said
    assert "mean reliance angle" not in line  # no mean over cells that behave differently


def test_one_seed_says_that_it_cannot_tell_the_edge():
    one = {cell: seeds[:1] for cell, seeds in CELLS.items()}
    (line,) = pair_findings(_rows(one))
    said = ("lenet (1 seed per cell): relied on the channel of the lower NAD index in 3 of 6 "
            "cells with i ≠ j (each within 10.0° of that channel alone); relied on the channel "
            "of the higher NAD index in 1 of 6 cells with i ≠ j (each within 10.0° of that "
            "channel alone); weighed the channels by their margins in 1 of 6 cells with i ≠ j, "
            "whatever their NAD indices: reliance angle 30.0°")  # fmt: skip
    assert line.startswith(said), line  # (1000, 10)'s one seed at 30°: by margin
    assert line.endswith("; not learned by any seed in 1 (test accuracy not clearly above "
                         "chance); with one seed per cell no cell can be told to be at the "
                         "edge of learning")  # fmt: skip


def test_a_grid_without_i_not_j_says_so():
    (line,) = pair_findings(_rows({(0, 0): CELLS[(0, 0)]}))
    assert line == ("lenet (3 seeds per cell): no cell with i ≠ j, so no choice between NAD "
                    "indices to report")  # fmt: skip


def test_a_learner_that_weighs_channels_by_margin_is_named_so_not_counted_as_a_nad_choice():
    # the MLP of the default study: 26-28° in every cell against atan(0.5) = 26.6°; read by the
    # side of 45° alone it would "rely on the lower NAD index" in half the cells and on the
    # higher in the other half
    mlp = {(0, 100): [(L, 26.0), (L, 27.6), (L, 26.5)], (100, 0): [(L, 26.2), (L, 27.0), (L, 26.9)]}
    (line,) = pair_findings(_rows(mlp))
    assert line == (
        "lenet (3 seeds per cell): by margin: weighed the channels by their margins in 2 of 2 "
        "cells with i ≠ j, whatever their NAD indices: reliance angle 26.0–27.6° against "
        "atan(ε2/ε1) = 26.6° (the angle of a predictor that weighs each channel by its margin; "
        "within ±13.3°, half the way to either channel alone)"
    )
    v = cell_verdicts(_rows(mlp))
    assert set(v["verdict"]) == {"margin"}
    # one channel alone is no margin-weighing: 0° and 90° are the lower NAD index
    lenet = {(0, 100): [(L, 0.4), (L, 1.2), (L, 0.0)], (100, 0): [(L, 89.0), (L, 90.0), (L, 88.8)]}
    (line,) = pair_findings(_rows(lenet))
    assert line.startswith("lenet (3 seeds per cell): the lower NAD index: relied on the channel "
                           "of the lower NAD index in 2 of 2 cells with i ≠ j (every seed, each "
                           "within 1.2° of that channel alone)")  # fmt: skip


def test_learned_means_clearly_above_chance_on_the_test_set():
    # a model whose training learned, at 51 % on 1 000 test points: not above chance by three
    # standard errors of a coin (54.7 %), so not learned; at 56 % it is
    rows = _rows({(0, 1000): [(L, 5.0)] * 3}).assign(n_test=1000)
    test = rows["split"] == "test"
    v = cell_verdicts(rows.assign(accuracy=rows["accuracy"].where(~test, 0.51)))
    assert v["verdict"].tolist() == ["not learned"] and v["learned"].tolist() == [0]
    v = cell_verdicts(rows.assign(accuracy=rows["accuracy"].where(~test, 0.56)))
    assert v["verdict"].tolist() == ["lower"] and v["learned"].tolist() == [3]


def test_the_first_page_leads_with_the_finding_and_a_one_cell_study_has_no_range():
    from nadpipe.report import _headline
    from nadpipe.studies import REGISTRY

    lenet = _rows({(0, 10): CELLS[(0, 10)], (10, 0): CELLS[(10, 0)]})
    mlp = _rows({(0, 10): [(L, 27.0)] * 3, (10, 0): [(L, 26.0)] * 3}).assign(arch="mlp")
    both = pd.concat([mlp, lenet], ignore_index=True)
    # the MLP weighs by margin, LeNet chose a NAD index in both cells: LeNet's figure first
    assert REGISTRY["nad_pairs"].headline_order(both, ["mlp", "lenet"]) == ["lenet", "mlp"]
    one = _rows({(0, 10): [(L, 10.0)]}).assign(
        study="nad_pairs", variant="i0_j10", diverged=False, n_test=1000
    )
    table = _headline("nad_pairs", one)
    assert "- 99.0\n" in table and "99.0 (" not in table  # 0.11.0: "99.0 (99.0 to 99.0)"
    assert "worst and best cell" not in table


def test_a_cell_whose_seeds_cannot_tell_the_channels_apart_is_tied_with_its_interval():
    # every seed below 45°, but 45° lies within two standard errors of their mean: tied, said
    # with the interval; seeds as far apart but far from 45° still choose a side
    near = {
        (0, 100): [(L, 36.0), (L, 44.0), (L, 44.9)],
        (0, 1000): [(L, 2.0), (L, 10.0), (L, 11.0)],
    }
    rows = _rows(near).assign(n_test=500)
    v = cell_verdicts(rows).set_index(["nad_i", "nad_j"])
    assert v.loc[(0, 100), "verdict"] == "tied" and v.loc[(0, 1000), "verdict"] == "lower"
    mean, se = v.loc[(0, 100), "reliance_mean"], v.loc[(0, 100), "reliance_se"]
    assert abs(mean - 41.633) < 1e-3 and abs(se - 2.8286) < 1e-3  # sd 4.899 over √3
    # the test accuracy's binomial standard error over all three seeds' 500 test samples, one
    # right and one wrong added (Laplace: 100 % is not ± 0)
    p = (0.99 * 1500 + 1) / 1502
    assert abs(v.loc[(0, 100), "accuracy_se"] - (p * (1 - p) / 1500) ** 0.5) < 1e-12
    perfect = cell_verdicts(rows.assign(accuracy=1.0))
    assert (perfect["accuracy_se"] > 0.0003).all()
    (line,) = pair_findings(rows)
    assert line.endswith(
        "; tied in 1 (45° within 2 standard errors of the seeds' mean angle: they cannot tell "
        "the channels apart): (0, 100): 41.6 ± 5.7°"
    ), line
    one = cell_verdicts(_rows({(0, 100): near[(0, 100)][1:2]}))
    assert one["verdict"].tolist() == ["lower"] and one["reliance_se"].isna().all()


def test_the_summary_table_is_styled_and_gives_each_cells_intervals(tmp_path):
    from nadpipe.report import summary_table

    rows = _rows(CELLS).assign(study="nad_pairs", n_test=1000, protocol=None)
    summary_table(rows, str(tmp_path / "table.html"))
    html = (tmp_path / "table.html").read_text()
    assert "<style>" in html and "position: sticky" in html and "<th>nad_j</th>" in html
    assert html.count("<tr") == 1 + len(CELLS)  # one header row
    # the row of cell (0, 10): its key, its conditions, its intervals, its verdict
    row = re.search(r"<td>lenet</td>\s*<td>0</td>\s*<td>10</td>(.*?)</tr>", html, re.S)[1]
    assert re.findall(r"<td>(.*?)</td>", row) == [
        "99.0", "± 0.4", "11.7 ± 8.8 (5.0 to 20.0)", "the lower NAD index (3 of 3 seeds learned)"
    ]  # fmt: skip
    # ± 0.4: 2·√(.99·.01/3000), the three seeds' 1 000 test samples each; a cell whose seeds
    # disagree (99, 50, 99 %): their spread, 2·28.3/√3
    edge = re.search(r"<td>0</td>\s*<td>1000</td>(.*?)</tr>", html, re.S)[1]
    assert re.findall(r"<td>(.*?)</td>", edge)[:2] == ["82.7 [50.0, 99.0]", "± 32.7"]
    dead = re.search(r"<td>500</td>\s*<td>1000</td>(.*?)</tr>", html, re.S)[1]
    assert re.findall(r"<td>(.*?)</td>", dead)[2] == "n/a"
