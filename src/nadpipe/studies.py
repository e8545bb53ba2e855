"""The studies, each a value in `REGISTRY`, all run by one DAG:

    nads -> train (arch x variant x seed) -> evaluate (conditions, measures) -> aggregate -> plot

A study says what its config block is (nadpipe.settings), its grid besides architectures and
seeds (typed variants with path-safe names), the input shape and classes of its models, how to
build its data from a small spec (the NADs and CIFAR-10 being inputs), its evaluation conditions
(which channels are kept), the per-model measures it wants, and its figures. Adding a study is a
new entry here and its figure in nadpipe.plots.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from .io import STUDIES_ENV, derive_seed, generator, run_values
from .provenance import importable_here, module_digest
from .settings import (
    OMIT_DEFAULT,
    CifarData,
    CifarNadSettings,
    FlipSettings,
    FourierSettings,
    NadPairsSettings,
    PoisonSettings,
    Shape,
    SingleDirectionSettings,
    StudySettings,
)
from .variants import (  # re-exported: a study of one's own derives from studies.Variant
    Frequency,
    IndexPair,
    NadIndex,
    Poisoned,
    Representation,
    Variant,
)

if TYPE_CHECKING:  # the data are built in the jobs; the DAG is planned without torch
    import pandas as pd
    import torch

    from .data import Splits


# -- the data of one model: a small spec, rebuilt exactly by every job that needs it ------------


@dataclass(frozen=True)
class DataSpec:
    """What determines one model's train and test tensors besides the NAD vectors and the
    CIFAR-10 files (inputs of the job): the study, the cell, the seed, the NADs' shape, the
    study's data settings and the CIFAR-10 preparation."""

    study: str
    variant: str  # the variant's path name
    seed: int
    shape: Shape  # of the NADs (or of the Fourier directions)
    settings: tuple[tuple[str, Any], ...]  # the study's data settings, e.g. (("eps", 1.0), ...)
    cifar: CifarData | None = None
    # a study of one's own: its module's code (study_code); nadpipe's studies have none
    code: str = field(default="", metadata={OMIT_DEFAULT: True})

    def get(self, key: str) -> Any:
        return dict(self.settings)[key]


@dataclass(frozen=True)
class Figure:
    """A figure of a study, drawn per architecture by `nadpipe.plots.<function>`, or by
    `module:function` (a study of its own), as f(summary rows, arch, output png)."""

    function: str
    caption: str  # reStructuredText; {arch} is replaced
    source: str = "summary"  # "summary": summary.parquet; "arrays": the models' arrays


class Study:
    """The base of every study; subclasses set the class attributes and the data."""

    name: ClassVar[str]
    settings: ClassVar[type[StudySettings]]
    variant: ClassVar[type]
    data_keys: ClassVar[tuple[str, ...]] = ()  # the study block's keys that shape its data
    classes: ClassVar[int] = 2
    needs_nads: ClassVar[bool] = True
    needs_cifar: ClassVar[bool] = False
    index_extra: ClassVar[int] = 0  # NADs past a configured index k a cell uses (k .. k + this)
    measures: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[dict[str, Figure]] = {}
    headline: ClassVar[str] = ""  # the figure on the report's first page ("": the first)
    about: ClassVar[str] = ""  # what the study is, in one sentence (the report's first page)
    reference_keys: ClassVar[tuple[str, ...]] = ()  # a published table's key columns, if any
    # JSON schema of the block's own keys (beside `$defs/study`'s), for a study the schema
    # file does not have (one registered by a module of its own: `register`)
    schema: ClassVar[dict[str, Any]] = {}
    # its smallest block that runs (one cell), for nadpipe.acceptance's micro study
    micro: ClassVar[dict[str, Any]] = {}

    def variants(self, s: StudySettings) -> list:
        return [self.variant(k) for k in s.indices]

    def data_settings(self, s: StudySettings, arch: str) -> dict:
        return {k: getattr(s, k) for k in self.data_keys}

    def input_shape(self, shape: Shape) -> Shape:
        """The models' input shape from the NADs' shape (C, H, W)."""
        return shape

    def conditions(self, shape: Shape) -> dict[str, tuple[int, ...]]:
        """Evaluation conditions: name -> the input channels kept (the others are zeroed)."""
        return {"all": tuple(range(self.input_shape(shape).c))}

    def stream(self, variant) -> tuple:
        """The key of a model's random streams (initialisation, batch order, trajectories)
        besides its architecture and seed."""
        return (self.name, variant.path)

    def build(self, spec: DataSpec, vectors: torch.Tensor | None) -> Splits:
        raise NotImplementedError

    def directions(self, spec: DataSpec, vectors: torch.Tensor | None) -> dict:
        """Input-space directions the study's measures need."""
        return {}

    def check_shape(self, shape: Shape) -> str | None:
        """Why the study cannot run on NADs of `shape`, or None."""
        return None

    def check_settings(self, s: StudySettings, shape: Shape, arch: str) -> str | None:
        """Why the study's settings `s` cannot hold for `arch`'s inputs of `shape` (a bound
        that depends on the input shape), as a message naming the key; or None."""
        return None

    def reference_axis(self, s: StudySettings) -> list[int] | None:
        """The values along each axis of a headerless published map (nadpipe.references), for
        a study whose cells form a square grid; None for others."""
        return None

    def findings(self, df: pd.DataFrame) -> list[str]:
        """What the study found, one sentence per architecture, computed from its summary
        rows (nadpipe.findings): the report's first page and the end of a run say them."""
        return []

    def headline_order(self, df: pd.DataFrame, archs: list[str]) -> list[str]:
        """The architectures in the order the report's first page shows their headline
        figure: the one that carries the finding first (by default, the config's order)."""
        return list(archs)

    def cell_columns(self, df: pd.DataFrame) -> pd.DataFrame | None:
        """Columns the report's summary page adds to each cell's accuracies (indexed by
        `arch` and the variant's columns), e.g. what the cell shows; None for none."""
        return None

    def describe_grid(self, s: dict) -> str:
        """The study's grid in words, from its plain settings (the report's first page)."""
        return f"NAD indices {', '.join(map(str, s['indices']))}"

    def array_variants(self, analysis) -> set[str] | None:
        """The variant paths of the cells the study's figures drawn from the models' arrays
        (Figure.source "arrays") show, from the analysis settings; None: every cell."""
        return None

    def check_analysis(self, s: StudySettings, analysis) -> str | None:
        """Why the analysis settings cannot hold for this study's grid, naming the key; or
        None."""
        return None


def _zeros(shape: Shape) -> torch.Tensor:
    # deferred: it loads torch, which importing studies does not
    import torch

    return torch.zeros(shape)


def _sizes(spec: DataSpec) -> dict[str, int]:
    return {"train": spec.get("n_train"), "test": spec.get("n_test")}


def _nad(vectors: torch.Tensor, k: int, shape: Shape) -> torch.Tensor:
    return vectors[k].reshape(shape)


class NadPairs(Study):
    name = "nad_pairs"
    micro = {"architectures": ["lenet", "mlp"], "indices": [0]}
    about = (
        "D(v1) ⊕ D(v2), where D(v) is a binary task along one direction v (x = ε·y·v "
        "+ w, label y = ±1, Gaussian noise w of std σ orthogonal to v) and ⊕ stacks a sample of "
        "each, with the same label, as channel blocks: block 1 from D(NAD i), block 2 from D(NAD "
        "j); either block alone solves the task, so which one a model uses is its architecture's "
        "choice (underspecification paper, Sec. 3)"
    )
    headline = "reliance"

    def findings(self, df: pd.DataFrame) -> list[str]:
        # deferred: it loads pandas, which importing studies does not
        from .findings import pair_findings

        return pair_findings(df)

    def headline_order(self, df: pd.DataFrame, archs: list[str]) -> list[str]:
        """The architectures with most cells whose seeds chose a NAD index first (a control
        that weighs by margin, like the MLP, after)."""
        # deferred: it loads pandas, which importing studies does not
        from .findings import cell_verdicts

        cells = cell_verdicts(df)
        chose = cells[cells["verdict"].isin(["lower", "higher"])].groupby("arch").size()
        return sorted(archs, key=lambda a: -chose.get(a, 0))

    def cell_columns(self, df: pd.DataFrame) -> pd.DataFrame:
        """Each cell's test accuracy and reliance angle over its learned seeds, each with its
        interval (± TIE_SE standard errors), and its verdict (nadpipe.findings: the lower or
        higher NAD index, by margin, at the edge, tied, not learned)."""
        # deferred: it loads pandas, which importing studies does not
        import pandas as pd

        from .findings import TIE_SE, VERDICTS, cell_verdicts

        cells = cell_verdicts(df)

        def interval(mean: float, se: float) -> str:
            if mean != mean:  # NaN: no seed learned
                return "n/a"
            if se != se:  # one seed: no spread to measure
                return f"{mean:.1f}"
            return f"{mean:.1f} ± {TIE_SE * se:.1f}"

        def angle(r) -> str:
            lo, hi = r["reliance_min"], r["reliance_max"]
            said = interval(r["reliance_mean"], r["reliance_se"])
            return said if hi - lo < 0.05 or said == "n/a" else f"{said} ({lo:.1f} to {hi:.1f})"

        return pd.DataFrame(
            {
                "arch": cells["arch"],
                "nad_i": cells["nad_i"],
                "nad_j": cells["nad_j"],
                f"both ± {TIE_SE} s.e.": [
                    "n/a" if e != e else f"± {100 * TIE_SE * e:.1f}" for e in cells["accuracy_se"]
                ],
                "reliance (°)": cells.apply(angle, axis=1),
                "finding": [
                    f"{VERDICTS[v]} ({n} of {k} seeds learned)"
                    for v, n, k in zip(
                        cells["verdict"], cells["learned"], cells["seeds"], strict=True
                    )
                ],
            }
        ).set_index(["arch", "nad_i", "nad_j"])

    def describe_grid(self, s: dict) -> str:
        return f"{super().describe_grid(s)}, every pair (i, j)"

    def check_analysis(self, s: NadPairsSettings, analysis) -> str | None:
        """analysis.cross_section.pairs must be cells of the grid."""
        indices = set(s.indices)
        for k, (i, j) in enumerate(analysis.cross_section.pairs or ()):
            if i not in indices or j not in indices:
                return (
                    f"config key 'analysis.cross_section.pairs.{k}': ({i}, {j}) is not a pair "
                    f"of {self.name}.indices {sorted(indices)}"
                )
        return None

    def array_variants(self, analysis) -> set[str] | None:
        """The cross sections' pairs: analysis.cross_section.pairs (every pair when null)."""
        pairs = analysis.cross_section.pairs
        return None if pairs is None else {IndexPair(i, j).path for i, j in pairs}

    settings = NadPairsSettings
    variant = IndexPair
    data_keys = ("eps1", "eps2", "sigma", "n_train", "n_test")
    measures = ("geometry",)
    figures = {
        "heatmap": Figure(
            "pair_heatmaps",
            "Test accuracy of {arch} trained on D(v1) ⊕ D(v2), v1 = NAD i (channel 1, margin "
            "ε1), v2 = NAD j (channel 2, margin ε2), mean over seeds. D(v) is a binary task "
            "along one direction: x = ε·y·v + w, label y = ±1, Gaussian noise w of std σ "
            "orthogonal to v; ⊕ stacks a sample of D(v1) and one of D(v2) with the same label "
            "as two channels, so that either channel alone solves the task. Left: both "
            "channels (in distribution); middle: channel 2 zeroed; right: channel 1 zeroed. "
            "A model that solves the task but fails on one channel alone relies on the other "
            "channel; low accuracy on the left means the architecture cannot learn those NAD "
            "directions.",
        ),
        "reliance": Figure(
            "reliance_heatmaps",
            "Channel reliance of {arch} per NAD pair (i, j), mean over seeds: the angle "
            "atan2(``|∂f/∂b|``, ``|∂f/∂a|``) of the input gradient of f (logit difference) in "
            "the plane of v1 ⊕ 0 (a) and 0 ⊕ v2 (b), averaged over test points (0° = only "
            "channel 1's direction, 90° = only channel 2's); and the median distance from a "
            "test point to the decision boundary along each direction (hatched: more than half "
            "of the points have no boundary within analysis.margin_max).",
        ),
        "complexity": Figure(
            "complexity_heatmaps",
            "Complexity of {arch}'s learned predictors per NAD pair (Novak et al., 2018): the "
            "mean Frobenius norm of the softmax output's input Jacobian at test points (log "
            "scale), and the mean number of ReLU activation-pattern changes per ReLU unit along "
            "closed ellipses through two test points of the same class, of different classes, "
            "and along random ellipses of matching radius.",
        ),
        "cross_sections": Figure(
            "cross_section_grid",
            "Decision-boundary cross-sections of {arch} (first seed, first stored test point): "
            "the logit difference f on the plane through the point spanned by v1 ⊕ 0 "
            "(horizontal, units of ε1) and 0 ⊕ v2 (vertical, units of ε2), one colour scale for "
            "all panels, the boundary f = 0 in black and the class means at ±(1, 1). A vertical "
            "boundary means the model uses channel 1 only, a horizontal one channel 2 only.",
            source="arrays",
        ),
    }

    def variants(self, s: NadPairsSettings) -> list[IndexPair]:
        return [IndexPair(i, j) for i in s.indices for j in s.indices]

    def input_shape(self, shape: Shape) -> Shape:
        return Shape(2 * shape.c, shape.h, shape.w)

    def conditions(self, shape: Shape) -> dict[str, tuple[int, ...]]:
        c = shape.c
        return {
            "both": tuple(range(2 * c)),  # in distribution
            "ch1_only": tuple(range(c)),  # channel 2 zeroed
            "ch2_only": tuple(range(c, 2 * c)),  # channel 1 zeroed
        }

    def stream(self, variant: IndexPair) -> tuple:
        return (variant.i, variant.j)

    def build(self, spec: DataSpec, vectors: torch.Tensor) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from .data import pair_splits

        v = IndexPair.parse(spec.variant)
        gen = generator("pair-data", derive_seed("pair", v.i, v.j, spec.seed))
        return pair_splits(
            _nad(vectors, v.i, spec.shape),
            _nad(vectors, v.j, spec.shape),
            spec.shape,
            spec.get("eps1"),
            spec.get("eps2"),
            spec.get("sigma"),
            _sizes(spec),
            gen,
        )

    def directions(self, spec: DataSpec, vectors: torch.Tensor) -> dict:
        # deferred: it loads torch, which importing studies does not
        import torch

        v = IndexPair.parse(spec.variant)
        zero = _zeros(spec.shape)
        return {
            "u1": torch.cat([_nad(vectors, v.i, spec.shape), zero]),  # v1 (+) 0
            "u2": torch.cat([zero, _nad(vectors, v.j, spec.shape)]),  # 0 (+) v2
            "eps1": spec.get("eps1"),
            "eps2": spec.get("eps2"),
        }


class SingleDirection(Study):
    name = "single_direction"
    micro = {"architectures": ["lenet"], "indices": [3]}
    reference_keys = ("nad_k",)
    about = "one D(NAD k) per model: how well each NAD is learned (NAD paper)"

    def findings(self, df: pd.DataFrame) -> list[str]:
        # deferred: it loads pandas, which importing studies does not
        from .findings import rank_findings

        return rank_findings(df, "nad_k")

    settings = SingleDirectionSettings
    variant = NadIndex
    data_keys = ("eps", "sigma", "n_train", "n_test")
    figures = {
        "accuracy": Figure(
            "single_direction_figure",
            "{arch} trained on one D(v), v = NAD k (x = ε·y·v + w, noise σ orthogonal to v): "
            "test accuracy against the NAD index k, mean over seeds with the range as a band; "
            "the title gives Spearman's rank correlation between k and accuracy.",
        )
    }

    def build(self, spec: DataSpec, vectors: torch.Tensor) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from .data import dv_splits

        v = _nad(vectors, NadIndex.parse(spec.variant).k, spec.shape)
        gen = generator("direction-data", self.name, spec.variant, spec.seed)
        return dv_splits(v, spec.shape, spec.get("eps"), spec.get("sigma"), _sizes(spec), gen)


class Fourier(Study):
    name = "fourier"
    micro = {"architectures": ["mlp"], "size": 1}
    reference_keys = ("freq_a", "freq_b")
    about = "one D(Fourier direction (a, b)) per model (NAD paper, Fig. 1)"
    settings = FourierSettings
    variant = Frequency
    data_keys = ("eps", "sigma", "n_train", "n_test")
    needs_nads = False
    figures = {
        "accuracy": Figure(
            "fourier_figure",
            "{arch} trained on one D(v), v = the real 2-D DFT direction of frequency (a, b) "
            "(x = ε·y·v + w), a and b in cycles per image: mean test accuracy over seeds for "
            "each frequency, on the grid the config asks for (fourier.layout: grid, a, b = "
            "0…size−1; centered, the zero frequency in the middle as the NAD paper draws it; "
            "each times fourier.step).",
        )
    }

    def check_settings(self, s: FourierSettings, shape: Shape, arch: str) -> str | None:
        top = min(shape.size)
        if s.size > top:
            return (
                f"config key 'fourier.size': {s.size} is greater than the maximum of {top} "
                f"({arch}'s inputs are {shape}: a frequency past {top - 1} is a lower one again, "
                f"e.g. f{top}_0 is the direction of f0_0)"
            )
        if s.size * s.step > top:
            return (
                f"config key 'fourier.step': {s.step} is greater than the maximum of "
                f"{top // s.size} for fourier.size {s.size} ({arch}'s inputs are {shape}: "
                f"size x step = {s.size * s.step} frequencies along an axis, past {top} they "
                f"are lower ones again; or a size of at most {top // s.step} for this step)"
            )
        return None

    def variants(self, s: FourierSettings) -> list[Frequency]:
        axis = self.reference_axis(s)
        return [Frequency(a, b) for a in axis for b in axis]

    def describe_grid(self, s: dict) -> str:
        what = "a, b = 0…size−1" if s["layout"] == "grid" else "the zero frequency centred"
        every = f", every {s['step']} cycles per image" if s["step"] != 1 else ""
        return f"{s['size']} x {s['size']} frequencies ({what}{every})"

    def reference_axis(self, s: FourierSettings) -> list[int]:
        """The frequencies along a and b, in cycles per image."""
        lo = 0 if s.layout == "grid" else -(s.size // 2)
        return [s.step * k for k in range(lo, lo + s.size)]

    def build(self, spec: DataSpec, vectors: None) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from .data import dv_splits, fourier_direction

        f = Frequency.parse(spec.variant)
        v = fourier_direction(f.a, f.b, spec.shape)
        gen = generator("direction-data", self.name, spec.variant, spec.seed)
        return dv_splits(v, spec.shape, spec.get("eps"), spec.get("sigma"), _sizes(spec), gen)


def _cifar_shape(shape: Shape, channels: tuple[int, ...]) -> str | None:
    if shape.size != (32, 32) or shape.c not in channels:
        allowed = " or ".join(f"{c}x32x32" for c in channels)
        return f"CIFAR-10 studies need NADs of shape {allowed}, not {shape}"
    return None


class CifarNad(Study):
    name = "cifar_nad"
    micro = {"architectures": ["lenet"], "indices": [0]}
    about = (
        "binary CIFAR-10 ⊕ D(NAD k): does the model use the CIFAR image or the "
        "synthetic channel (underspecification paper, Sec. 4)"
    )
    settings = CifarNadSettings
    variant = NadIndex
    needs_cifar = True
    data_keys = ("eps", "sigma")  # sigma per architecture (data_settings)
    measures = ("cifar_reliance",)
    figures = {
        "accuracy": Figure(
            "cifar_nad_figure",
            "Binary CIFAR-10 ⊕ D(v) for {arch}: test accuracy against the NAD index k of the "
            "synthetic channel's direction v, with all channels, with the synthetic channel "
            "zeroed (CIFAR only) and with the CIFAR channels zeroed (synthetic only); right, "
            "the angle between the input gradient's component along v and its part on the "
            "CIFAR channels (0° = uses only v). Lines are means over seeds, bands the range.",
        )
    }

    def data_settings(self, s: CifarNadSettings, arch: str) -> dict:
        return {"eps": s.eps, "sigma": s.sigma_per_arch.get(arch, s.sigma)}

    def input_shape(self, shape: Shape) -> Shape:
        return Shape(3 + shape.c, 32, 32)

    def conditions(self, shape: Shape) -> dict[str, tuple[int, ...]]:
        c = 3 + shape.c
        return {
            "all": tuple(range(c)),
            "cifar_only": (0, 1, 2),
            "synthetic_only": tuple(range(3, c)),
        }

    def check_shape(self, shape: Shape) -> str | None:
        return _cifar_shape(shape, (1, 3))

    def build(self, spec: DataSpec, vectors: torch.Tensor) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from . import cifar

        v = _nad(vectors, NadIndex.parse(spec.variant).k, spec.shape)
        out = {}
        for split, (x, classes) in cifar.load_splits(spec.cifar).items():
            y = cifar.binary_labels(classes)
            key = (split, spec.variant, spec.seed)
            x = cifar.normalise(x, spec.cifar)
            out[split] = (cifar.with_synthetic(x, y, v, spec.get("eps"), spec.get("sigma"), key), y)
        return out

    def directions(self, spec: DataSpec, vectors: torch.Tensor) -> dict:
        u = _zeros(self.input_shape(spec.shape))
        u[3:] = _nad(vectors, NadIndex.parse(spec.variant).k, spec.shape)
        return {"u": u, "block": [0, 1, 2]}


class Poison(Study):
    name = "poison"
    micro = {"architectures": ["lenet"], "indices": [0]}
    about = "CIFAR-10 whose training images carry a class code along NADs i, i+1 (NAD paper)"
    settings = PoisonSettings
    variant = Poisoned
    data_keys = ("eps",)
    classes = 10
    needs_cifar = True
    index_extra = 1  # carriers along NADs i and i + 1 (Poisoned.nad_indices)
    figures = {
        "accuracy": Figure(
            "poison_figure",
            "NAD poisoning for {arch}: accuracy on the clean CIFAR-10 test set and on the "
            "poisoned training set against the poisoned NAD index i (each training image "
            "carries a class code along NADs i and i+1; nadpipe.cifar.carrier). Lines are means "
            "over seeds, bands the range.",
        )
    }

    def input_shape(self, shape: Shape) -> Shape:
        return Shape(3, 32, 32)

    def check_shape(self, shape: Shape) -> str | None:
        return _cifar_shape(shape, (1,))

    def build(self, spec: DataSpec, vectors: torch.Tensor) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from . import cifar

        raw = cifar.load_splits(spec.cifar)
        (x_train, c_train), (x_test, c_test) = raw["train"], raw["test"]
        i = Poisoned.parse(spec.variant).i
        poisoned = cifar.poison(x_train, c_train, vectors, i, spec.get("eps"))
        return {
            "train": (cifar.normalise(poisoned, spec.cifar), c_train),
            "test": (cifar.normalise(x_test, spec.cifar), c_test),
        }


class Flip(Study):
    name = "flip"
    micro = {"architectures": ["lenet"]}
    about = "CIFAR-10 with each channel's NAD coefficients reversed (NAD paper)"
    settings = FlipSettings
    variant = Representation
    classes = 10
    needs_cifar = True
    figures = {
        "accuracy": Figure(
            "flip_figure",
            "NAD-flipped CIFAR-10 for {arch}: test accuracy when trained on the original images "
            "and on the images whose coefficients in the NAD basis are reversed (NAD k ↔ NAD "
            "d−1−k), with the same settings. Bars are means over seeds, dots single seeds.",
        )
    }

    def describe_grid(self, s: dict) -> str:
        return "the original and the flipped images"

    def variants(self, s: FlipSettings) -> list[Representation]:
        return [Representation("original"), Representation("flipped")]

    def input_shape(self, shape: Shape) -> Shape:
        return Shape(3, 32, 32)

    def check_shape(self, shape: Shape) -> str | None:
        return _cifar_shape(shape, (1, 3))

    def build(self, spec: DataSpec, vectors: torch.Tensor) -> Splits:
        # deferred: it loads torch, which importing studies does not
        from . import cifar

        raw = cifar.load_splits(spec.cifar)
        m = cifar.flip_matrix(vectors) if spec.variant == "flipped" else None
        return {
            split: (
                cifar.normalise(x, spec.cifar)
                if m is None
                else cifar.flip_images(cifar.normalise(x, spec.cifar), m),
                c,
            )
            for split, (x, c) in raw.items()
        }


# drawn for every architecture of a study with NADs when analysis.nad_bands is enabled
NAD_BANDS = Figure(
    "nad_bands_figure",
    "{arch}: which NADs the trained models use. Test accuracy (%, mean over seeds) of each "
    "model (row) on its unchanged test inputs, with their components along a band of NADs "
    "removed ('without a-b'), and with only that band kept ('only a-b'); no retraining. A "
    "model that relies on a band loses its accuracy without it and keeps it with it alone.",
)

REGISTRY: dict[str, Study] = {
    s.name: s for s in (NadPairs(), CifarNad(), Poison(), Flip(), SingleDirection(), Fourier())
}


def register(entry: Study) -> Study:
    """Add a study to the registry: everything nadpipe knows of a study is on its entry (its
    settings, variant, data, conditions, measures, figures, what the report says, and
    `schema`, its block's own keys). A module that calls this, named in NADPIPE_STUDIES, is
    imported with nadpipe.studies in every process of a run (Snakemake's, the jobs')."""
    if (
        entry.name in REGISTRY
        and type(REGISTRY[entry.name]).__qualname__ != type(entry).__qualname__
    ):
        raise ValueError(f"a study named {entry.name!r} is registered already")
    refused = variant_problem(entry)
    if refused:
        raise ValueError(refused)
    REGISTRY[entry.name] = entry
    return entry


VARIANT_MEMBERS = ("PATTERN", "COLUMNS", "parse", "columns", "path", "nad_indices")


def variant_problem(entry: Study) -> str | None:
    """What a study's variant lacks, in words (nadpipe.studies.Variant gives every member but
    the fields, FORMAT, COLUMNS and, for a study with NAD indices, nad_indices); None when
    nothing."""
    variant = getattr(entry, "variant", None)
    if variant is None:
        return f"study {entry.name!r} has no variant (a nadpipe.studies.Variant dataclass)"
    missing = [m for m in VARIANT_MEMBERS if not hasattr(variant, m)]
    if missing:
        return (
            f"study {entry.name!r}: its variant {variant.__name__} lacks {', '.join(missing)}; "
            f"derive it from nadpipe.studies.Variant, which gives them"
        )
    indices = "indices" in {f.name for f in fields(entry.settings)}
    if entry.needs_nads and indices and variant.nad_indices is Variant.nad_indices:
        return (
            f"study {entry.name!r}: its settings have NAD indices, so its variant "
            f"{variant.__name__} must say which NADs a cell uses (nad_indices), or the config "
            f"check cannot test them against the NADs' rank"
        )
    return None


class StudyModuleError(ImportError):
    """A module named to register a study of its own cannot be imported."""


_ADDED: dict[str, set[str]] = {}  # the studies each study module registered


def load_modules(names, where) -> None:
    """Import the modules `names` that register studies of their own; `where(i)` says where
    the i-th was named (a config key, an environment variable), for the message when one
    cannot be imported. From the working directory or the import path, as a user model."""

    here = importable_here()
    for i, name in enumerate(names):
        try:
            before, fresh = set(REGISTRY), name not in sys.modules
            importlib.import_module(name)
            if fresh:  # what it registered, directly or through what it imports
                _ADDED[name] = set(REGISTRY) - before
        except Exception as e:  # noqa: BLE001 -- a module can fail to import in any way
            raise StudyModuleError(
                f"{where(i)}: cannot import the study module {name!r} ({type(e).__name__}: "
                f"{e}); it is looked for in the working directory {here} and on the import "
                "path"
            ) from e
        if name not in _ADDED:  # imported before, not here: its studies by their module
            _ADDED[name] = {n for n, e in REGISTRY.items() if type(e).__module__ == name}
        mine = _ADDED[name]
        if not mine:
            raise StudyModuleError(
                f"{where(i)}: the study module {name!r} imports, but registers no study "
                "(a study of one's own is a subclass of nadpipe.studies.Study passed to "
                "nadpipe.studies.register when its module is imported); name only modules "
                "that register one"
            )


def _env_modules(variable: str) -> list[str]:
    return [m.strip() for m in os.environ.get(variable, "").split(",") if m.strip()]


# the study modules of a run's config (its jobs), and those of the environment variable
load_modules(run_values().get("study_modules", []), lambda i: f"config key 'study_modules.{i}'")
load_modules(_env_modules(STUDIES_ENV), lambda i: f"environment variable {STUDIES_ENV}")


def study_code(study: str) -> str:
    """The code digest of a study of one's own (its module and the modules beside it that it
    imports): part of its cells' data spec, so that editing it reruns them; "" for nadpipe's."""

    module = type(REGISTRY[study]).__module__
    return "" if module.split(".")[0] == "nadpipe" else module_digest(module)


PROTOCOL_PATTERN = r"@[A-Za-z0-9_]{1,32}"  # a variant's protocol suffix (StudySettings.protocols)


def variant_pattern() -> str:
    """The paths of every registered study's variants, under a protocol or not (Snakemake's
    wildcard constraint): of the registry as it is now, studies of one's own included."""
    patterns = sorted({s.variant.PATTERN for s in REGISTRY.values()})
    return "(?:" + "|".join(patterns) + f")(?:{PROTOCOL_PATTERN})?"


def with_protocol(variant: str, protocol: str) -> str:
    """A cell's variant path under `protocol` ("k10", "long" -> "k10@long"; "" -> "k10")."""
    return f"{variant}@{protocol}" if protocol else variant


def split_protocol(path: str) -> tuple[str, str]:
    """("k10", "long") of "k10@long"; ("k10", "") of "k10"."""
    variant, _, protocol = path.partition("@")
    return variant, protocol
