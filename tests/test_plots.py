import matplotlib.image as mpimg
import pandas as pd
import pytest

from nadpipe.plots import pair_grid, pair_heatmaps


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
