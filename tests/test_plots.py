"""Figures, read through matplotlib's objects: labels, shared scales, marked cells."""

import math
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.colors import LogNorm

from nadpipe import plots, plots_nads
from nadpipe.nads import compute_nads
from nadpipe.settings import NadSettings, Shape


def _rows(diverge=None):
    rows = []
    for seed, acc in ((0, 0.6), (1, 0.8)):
        for i in (0, 5):
            for j in (0, 5, 9):
                for cond in ("both", "ch1_only", "ch2_only"):
                    a = acc if (i, j) == (0, 5) else 1.0
                    bad = diverge == (i, j)
                    rows.append(
                        dict(
                            arch="lenet",
                            nad_i=i,
                            nad_j=j,
                            seed=seed,
                            split="test",
                            condition=cond,
                            accuracy=float("nan") if bad else a,
                            eps1=1.0,
                            eps2=0.5,
                            sigma=1.0,
                            diverged=bad,
                            reliance_deg=10.0 * j,
                            margin_v1=np.inf if i == 5 else 0.5 + j,
                            margin_v2=2.0,
                            jacobian_norm_test=10.0 ** -(i + j / 3),
                            relu_units=100,
                            transitions_same_class=50.0,
                            transitions_diff_class=80.0,
                            transitions_random=20.0,
                        )
                    )
    return pd.DataFrame(rows)


def test_grid_is_the_mean_over_seeds_with_v1_on_rows():
    grid = plots.pair_grid(_rows(), "both")
    assert list(grid.index) == [0, 5] and list(grid.columns) == [0, 5, 9]
    assert grid.loc[0, 5] == pytest.approx(0.7) and grid.loc[5, 0] == 1.0


def _images(fig):
    return [im for ax in fig.axes for im in ax.get_images()]


def test_heatmaps_share_one_labelled_scale_and_name_the_data(tmp_path):
    fig = plots.pair_heatmaps(_rows(), "lenet", str(tmp_path / "h.png"))
    ims = _images(fig)
    assert len(ims) == 3 and {(im.norm.vmin, im.norm.vmax) for im in ims} == {(50, 100)}
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert "test accuracy (%)" in labels  # the colour bar says quantity and unit
    title = fig._suptitle.get_text()
    assert "D(v1) ⊕ D(v2)" in title and "ε1 = 1" in title and "ε2 = 0.5" in title
    img = mpimg.imread(tmp_path / "h.png")
    assert img.shape[1] > 2 * img.shape[0] and img.std() > 0.05
    with pytest.raises(ValueError, match="no rows for architecture 'mlp'"):
        plots.pair_heatmaps(_rows(), "mlp", str(tmp_path / "h.png"))


def test_margins_share_a_scale_and_not_found_cells_are_marked(tmp_path):
    fig = plots.reliance_heatmaps(_rows(), "lenet", str(tmp_path / "r.png"))
    margin_axes = [ax for ax in fig.axes if ax.get_title().startswith("median distance")]
    norms = {(im.norm.vmin, im.norm.vmax) for ax in margin_axes for im in ax.get_images()}
    assert len(margin_axes) == 2 and len(norms) == 1  # one scale for both margin panels
    v1 = margin_axes[0]
    texts = [t.get_text() for t in v1.texts]
    assert texts.count("not\nfound") == 3  # the row i = 5: no boundary found, not a number
    assert "inf" not in " ".join(texts)
    hatched = [p for p in v1.patches if p.get_hatch()]
    assert len(hatched) == 3
    reliance = next(ax for ax in fig.axes if ax.get_title().startswith("reliance"))
    assert (reliance.get_images()[0].norm.vmin, reliance.get_images()[0].norm.vmax) == (0, 90)


def test_did_not_fit_and_boundary_not_found_are_told_apart(tmp_path):
    # b879b52: both dimgrey "xx", alike in the figure and in its legend
    df = _rows().assign(outcome="fit")
    df.loc[(df.nad_i == 0) & (df.nad_j == 9), "outcome"] = "did not fit"
    fig = plots.reliance_heatmaps(df, "lenet", str(tmp_path / "r.png"))
    legend = {t.get_text().split(":")[0].split(" within")[0]: h for leg in fig.legends
              for t, h in zip(leg.get_texts(), leg.legend_handles, strict=True)}  # fmt: skip
    dead, lost = legend["did not fit"], legend["boundary not found"]
    assert dead.get_hatch() != lost.get_hatch()
    assert tuple(dead.get_edgecolor()) != tuple(lost.get_edgecolor())
    v1 = next(ax for ax in fig.axes if ax.get_title().startswith("median distance"))
    patterns = {p.get_hatch() for p in v1.patches if p.get_hatch()}
    assert patterns == {dead.get_hatch(), lost.get_hatch()}  # each cell in its own pattern


def test_cells_the_findings_call_not_learned_are_marked_where_their_angles_are_drawn(tmp_path):
    # 0.11.0 painted angles (73°, 44°) in the cells the findings call not learned, unmarked:
    # every seed fit its training set, none is above chance on the test set
    df = _rows().assign(outcome="fit", n_test=1000)
    df.loc[(df.nad_i == 5) & (df.nad_j == 9), "accuracy"] = 0.51
    fig = plots.reliance_heatmaps(df, "lenet", str(tmp_path / "r.png"))
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any(t.startswith("not learned: every seed fit") and "(1 cells)" in t for t in legend)
    assert plots._not_learned(df).sum() == len(df[(df.nad_i == 5) & (df.nad_j == 9)])


def test_jacobian_norm_is_on_a_log_scale_and_transitions_are_per_relu_unit(tmp_path):
    fig = plots.complexity_heatmaps(_rows(), "lenet", str(tmp_path / "c.png"))
    jac = next(ax for ax in fig.axes if ax.get_title().startswith("softmax"))
    assert isinstance(jac.get_images()[0].norm, LogNorm)
    per_unit = [ax for ax in fig.axes if ax.get_title().startswith("transitions per ReLU unit")]
    assert len(per_unit) == 3
    assert "0.5" in [t.get_text() for t in per_unit[0].texts]  # 50 transitions / 100 units
    assert len({(im.norm.vmin, im.norm.vmax) for ax in per_unit for im in ax.get_images()}) == 1
    no_relu = _rows().assign(
        relu_units=0,
        transitions_same_class=np.nan,
        transitions_diff_class=np.nan,
        transitions_random=np.nan,
    )
    fig = plots.complexity_heatmaps(no_relu, "lenet", str(tmp_path / "c2.png"))
    ax = next(ax for ax in fig.axes if ax.get_title().startswith("transitions per ReLU unit"))
    assert [t.get_text() for t in ax.texts].count("n/a") == 6


def test_diverged_cells_are_hatched_red_and_counted(tmp_path):
    fig = plots.pair_heatmaps(_rows(diverge=(5, 9)), "lenet", str(tmp_path / "d.png"))
    red = [p for ax in fig.axes for p in ax.patches if p.get_hatch() and p.get_edgecolor()[0] > 0.9]
    assert len(red) == 3  # the cell in each of the three panels
    assert any("diverged" in t.get_text() for leg in fig.legends for t in leg.get_texts())


def test_cross_sections_share_one_scale_with_a_colour_bar_and_a_legend(tmp_path):
    grid = np.linspace(-3, 3, 7)
    sections = [
        {
            "values": np.outer(grid, np.ones(7))[None] * scale,
            "a": grid,
            "b": grid,
            "key_nad_i": np.array(i),
            "key_nad_j": np.array(j),
        }
        for (i, j), scale in (((0, 0), 1.0), ((0, 9), 5.0), ((9, 0), 0.1), ((9, 9), 2.0))
    ]
    fig = plots.cross_section_grid(sections, "lenet", str(tmp_path / "x.png"))
    meshes = [c for ax in fig.axes for c in ax.collections if hasattr(c, "get_clim")]
    assert {m.get_clim() for m in meshes if m.get_array() is not None and m.get_clim()[0] < 0} == {
        (-15.0, 15.0)
    }
    assert any("logit" in ax.get_ylabel() for ax in fig.axes)  # the colour bar of f
    legend_texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "class +1 mean" in legend_texts and "class −1 mean" in legend_texts


U40 = torch.linalg.qr(torch.randn(1024, 40, generator=torch.Generator().manual_seed(0)))[0].T
S40 = torch.cat([torch.full((10,), 1.5), torch.full((30,), 1.0)])


class TenAboveThirty(torch.nn.Module):
    """Sensitivities with ten directions of scale 1.5 above thirty of scale 1: a top-10 NAD
    subspace that takes a few hundred networks to pin down."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(40))

    def forward(self, x):
        return ((x.flatten(1) @ U40.T) * (self.a * S40)).sum(1, keepdim=True)


def test_nad_figure_stamps_an_unconverged_estimate_and_names_a_flat_spectrum(tmp_path):
    # ten directions above thirty, from 40 networks: an order exists, not yet found
    art = compute_nads(
        TenAboveThirty, NadSettings("gradient", n_networks=40), Shape(1, 32, 32), progress=False
    )
    verdict, fig = plots_nads.nad_figure(art, "model", str(tmp_path / "n.png"), min_overlap=0.5)
    assert verdict.startswith("WARNING: NADs of model: split-half top-10 overlap")
    assert "raise nads.n_networks (now 40)" in verdict and "anisotropy 3.19" in verdict
    stamp = [t.get_text() for t in fig.texts]
    assert any(t.startswith("not converged: top-10 overlap") for t in stamp)
    verdict, fig = plots_nads.nad_figure(art, "model", str(tmp_path / "n.png"), 0.0)
    assert not verdict.startswith("WARNING")
    assert not any("converged" in t.get_text() for t in fig.texts)
    assert mpimg.imread(tmp_path / "n.png").shape[0] > 600
    # every panel kind has a labelled colour bar; the Fourier panels share one scale
    labels = {ax.get_ylabel() for ax in fig.axes}
    assert {"NAD / its max |value|", "share of its energy (log)"} <= labels
    fourier = [im for ax in fig.axes for im in ax.images if im.get_cmap().name == "magma"]
    assert len(fourier) == 16 and len({im.get_clim() for im in fourier}) == 1
    # the spectrum stops at the covariance's rank (39), not 25 decades of rounding noise below
    (line,) = [ln for ax in fig.axes for ln in ax.lines if ln.get_label() == "eigenvalue"]
    assert len(line.get_xdata()) == 39
    # a linear model's sensitivity is its random weight vector: an isotropic covariance, no
    # order to find; from more networks than coordinates said as such, no warning and no stamp
    # (at 820f241: "not converged")
    logreg = lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 1))  # noqa: E731
    settings = NadSettings("gradient", n_networks=1100)
    flat = compute_nads(logreg, settings, Shape(1, 32, 32), progress=False)
    verdict, fig = plots_nads.nad_figure(flat, "logreg", str(tmp_path / "f.png"), min_overlap=0.5)
    assert re.match(r"NADs of logreg: nearly isotropic: its top eigenvalue is 0\.9\d x", verdict)
    assert not any("converged" in t.get_text() for t in fig.texts)
    # from fewer networks than coordinates a flat spectrum cannot be told from an unresolved one
    few = compute_nads(logreg, NadSettings("gradient", n_networks=40), Shape(1, 32, 32),
                       progress=False)  # fmt: skip
    verdict, _ = plots_nads.nad_figure(few, "logreg", str(tmp_path / "g.png"), min_overlap=0.5)
    assert verdict.startswith("WARNING") and "a flat spectrum cannot be told" in verdict
    # too few networks for any overlap: convergence unknown, said on the figure and the verdict
    few = compute_nads(TenAboveThirty, NadSettings("gradient", n_networks=4), Shape(1, 32, 32),
                       progress=False)  # fmt: skip
    verdict, fig = plots_nads.nad_figure(few, "model", str(tmp_path / "f.png"), 0.5)
    assert verdict.startswith("WARNING") and "convergence unknown" in verdict
    assert any("convergence unknown" in t.get_text() for t in fig.texts)
    assert math.isnan(few["split_half"]["overlap"][10])


def test_a_basis_without_a_spectrum_leaves_no_blank_space(tmp_path):
    basis = torch.linalg.qr(torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1)))[0]
    art = {"vectors": basis.T[:20], "eigenvalues": None, "shape": [1, 32, 32], "file": "b.npy"}
    _, fig = plots_nads.nad_figure(art, "b", str(tmp_path / "b.png"), 0.5)
    img = mpimg.imread(tmp_path / "b.png")
    bottom = img[int(0.75 * img.shape[0]) :, :, :3]
    assert bottom.std() > 0.05  # the last row of panels reaches the bottom (820f241: blank)


def test_doing_what_the_nad_warning_says_makes_it_go_away(tmp_path):
    shape = Shape(1, 32, 32)
    art = compute_nads(
        TenAboveThirty, NadSettings("gradient", n_networks=40), shape, progress=False
    )
    verdict, _ = plots_nads.nad_figure(art, "model", str(tmp_path / "a.png"), min_overlap=0.5)
    assert verdict.startswith("WARNING") and "raise nads.n_networks (now 40)" in verdict
    more = compute_nads(
        TenAboveThirty, NadSettings("gradient", n_networks=400), shape, progress=False
    )
    verdict, fig = plots_nads.nad_figure(more, "model", str(tmp_path / "b.png"), min_overlap=0.5)
    assert not verdict.startswith("WARNING")
    assert not any("converged" in t.get_text() for t in fig.texts)


def test_nad_band_figure_puts_each_model_against_each_band(tmp_path):
    rows = []
    for k, (intact, w0, o0, w1, o1) in {5: (0.99, 0.5, 0.99, 0.98, 0.5),
                                       40: (0.9, 0.88, 0.52, 0.5, 0.9)}.items():  # fmt: skip
        for seed, shift in ((0, 0.0), (1, 0.02)):
            rows.append(dict(study="single_direction", arch="lenet", variant=f"k{k}", nad_k=k,
                             seed=seed, split="test", condition="all", accuracy=intact - shift,
                             band_without_0_9=w0, band_only_0_9=o0, band_without_10_1023=w1,
                             band_only_10_1023=o1))  # fmt: skip
    df = pd.DataFrame(rows)
    fig = plots.nad_bands_figure(df, "lenet", str(tmp_path / "b.png"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "unchanged", "without 0–9", "without 10–1023", "only 0–9", "only 10–1023"
    ]  # fmt: skip
    assert [t.get_text() for t in ax.get_yticklabels()] == ["k5", "k40"]
    values = ax.images[0].get_array()
    assert values[0, 0] == pytest.approx(98.0) and values[1, 2] == pytest.approx(50.0)
    assert ax.images[0].get_clim() == (0, 100)
    assert fig.axes[1].get_ylabel() == "test accuracy (%)"
    assert mpimg.imread(tmp_path / "b.png").std() > 0.05


def test_a_fourier_map_with_a_step_draws_each_cell_one_step_wide(tmp_path):
    # fourier.step 2 (the NAD paper's map): frequencies -2 and 0; at 0.6 a model did not fit
    rows = [
        dict(arch="lenet", seed=0, split="test", protocol=None, freq_a=a, freq_b=b, eps=0.5,
             sigma=0.5, accuracy=0.5 if (a, b) == (0, -2) else 0.9,
             outcome="did not fit" if (a, b) == (0, -2) else "fit")
        for a in (-2, 0) for b in (-2, 0)
    ]  # fmt: skip
    fig = plots.fourier_figure(pd.DataFrame(rows), "lenet", str(tmp_path / "f.png"))
    ax = fig.axes[0]
    assert ax.images[0].get_extent() == [-3.0, 1.0, 1.0, -3.0]  # two cells of width 2 each way
    (hatched,) = [p for p in ax.patches if p.get_hatch()]
    assert (hatched.get_x(), hatched.get_y(), hatched.get_width()) == (-3.0, -1.0, 2.0)
    assert "cycles per image" in ax.get_xlabel()
