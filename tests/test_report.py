"""The report's headline findings, computed from the rows: cells over their seeds, cells at
the edge of learning called out (one seed at the edge of learning is a coin, not a finding)."""

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
                             "accuracy": 0.5 if outcome != "learned" else 0.99,
                             "reliance_deg": angle if outcome == "learned" else float("nan"),
                             "eps1": 1.0, "eps2": 0.5})  # fmt: skip
    return pd.DataFrame(rows)


L, D = "learned", "did not learn"
CELLS = {
    (0, 10): [(L, 10.0), (L, 20.0), (L, 5.0)],  # channel 1 = NAD 0, the lower: every seed
    (10, 0): [(L, 80.0), (L, 85.0), (L, 70.0)],  # channel 2 = NAD 0: every seed
    (0, 1000): [(L, 10.0), (D, 0.0), (L, 20.0)],  # one seed did not learn: the edge
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


def test_the_headline_counts_cells_and_names_those_at_the_edge():
    (line,) = pair_findings(_rows(CELLS))
    said = ("lenet (3 seeds per cell): relied on the channel of the lower NAD index in 2 of 6 "
            "cells with i ≠ j (every seed), on the higher in 1; at the edge of learning (its "
            "seeds disagree) in 2: (0, 1000), (1000, 10); not learned by any seed in 1; mean "
            "reliance angle")  # fmt: skip
    assert line.startswith(said), line
    assert "atan(ε2/ε1) = 26.6°" in line


def test_one_seed_says_that_it_cannot_tell_the_edge():
    one = {cell: seeds[:1] for cell, seeds in CELLS.items()}
    (line,) = pair_findings(_rows(one))
    said = ("lenet (1 seed per cell): relied on the channel of the lower NAD index in 3 of 6 "
            "cells with i ≠ j, on the higher in 2; not learned by any seed in 1; with one seed "
            "per cell no cell can be told")  # fmt: skip
    assert line.startswith(said), line


def test_a_grid_without_i_not_j_says_so():
    (line,) = pair_findings(_rows({(0, 0): CELLS[(0, 0)]}))
    assert line.startswith("lenet (3 seeds per cell): no cell with i ≠ j, so no choice between "
                           "NAD indices to report; mean reliance angle")  # fmt: skip
