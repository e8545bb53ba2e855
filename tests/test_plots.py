import matplotlib.image as mpimg
import pandas as pd
import pytest
import torch

from nadpipe.plots import nad_figure, pair_grid, pair_heatmaps


def _rows():
    rows = []
    for seed, acc in ((0, 0.6), (1, 0.8)):
        for i in (0, 5):
            for j in (0, 5, 9):
                for cond in ("both", "ch1_only", "ch2_only"):
                    a = acc if (i, j) == (0, 5) else 1.0
                    rows.append(
                        dict(
                            arch="lenet",
                            nad_i=i,
                            nad_j=j,
                            seed=seed,
                            split="test",
                            condition=cond,
                            accuracy=a,
                        )
                    )
    return pd.DataFrame(rows)


def test_grid_is_the_mean_over_seeds_with_v1_on_rows():
    grid = pair_grid(_rows(), "both")
    assert list(grid.index) == [0, 5] and list(grid.columns) == [0, 5, 9]
    assert grid.loc[0, 5] == pytest.approx(0.7) and grid.loc[5, 0] == 1.0


def test_heatmap_figure_is_written(tmp_path):
    out = tmp_path / "h.png"
    pair_heatmaps(_rows(), "lenet", str(out))
    img = mpimg.imread(out)
    assert img.shape[1] > 2 * img.shape[0] and img.std() > 0.05  # three panels side by side
    with pytest.raises(ValueError, match="no rows for architecture 'mlp'"):
        pair_heatmaps(_rows(), "mlp", str(out))


def test_nad_figure_warns_when_the_halves_disagree(tmp_path):
    from nadpipe.nads import NadSettings, compute_nads

    art = compute_nads(lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 1)),
                       NadSettings(n_networks=40), progress=False)  # fmt: skip
    verdict = nad_figure(art, "logreg", str(tmp_path / "n.png"), min_overlap=0.99)
    assert verdict.startswith("WARNING: NADs of logreg: split-half top-10 overlap")
    assert "raise nads.n_networks (now 40)" in verdict
    assert not nad_figure(art, "logreg", str(tmp_path / "n.png"), 0.0).startswith("WARNING")
    assert mpimg.imread(tmp_path / "n.png").shape[0] > 600
