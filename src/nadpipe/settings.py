"""Every setting of nadpipe as a typed dataclass: the one place where defaults live.

The config loader (nadpipe.config) fills every key a config leaves out from these classes, the
`nadpipe` command uses them as its defaults, and a test proves that the JSON schema, these
classes and the README's table of keys agree. Each study's block (e.g. `NadPairsSettings`) restates
only the defaults in which it differs, its training settings included.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, NamedTuple

from .backend import Backend
from .estimators import ESTIMATORS


class Shape(NamedTuple):
    """An input shape (channels, height, width)."""

    c: int
    h: int
    w: int

    @property
    def d(self) -> int:
        return self.c * self.h * self.w

    @property
    def size(self) -> tuple[int, int]:
        return self.h, self.w

    def __str__(self) -> str:
        return f"{self.c}x{self.h}x{self.w}"


# the registry models (nadpipe.models.REGISTRY), named here so the config loads without torch
REGISTRY_NAMES = (
    "logreg",
    "mlp",
    "lenet",
    "lenet_nopool",
    "resnet18",
    "resnet18_nopool",
    "vgg11",
    "densenet121",
    "vit_tiny",
    "mlp_mixer_tiny",
)

# the input shape of an architecture's single-logit NAD networks unless it says otherwise
DEFAULT_SHAPE = Shape(1, 32, 32)


@dataclass(frozen=True)
class ModelSpec:
    """Everything that determines a model's architecture: the builder (a registry name or
    "package.module:callable"), its keyword arguments, the input shape and the outputs
    (nadpipe.models.build makes the module)."""

    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    shape: Shape = DEFAULT_SHAPE
    classes: int = 2
    source: str = ""  # a user model's code: sha256 of its module and what it imports beside it

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.model}({args}) on {self.shape} inputs, {self.classes} output(s)"


# a field's metadata key: the field is left out of `plain` while it has its default, so that a
# field added to a job spec changes no existing job's params (Snakemake reruns none of them)
OMIT_DEFAULT = "omit_default"


@dataclass(frozen=True)
class NadSettings:
    """How the NADs of an architecture are computed."""

    estimator: str = "dipole"  # a name of nadpipe.estimators.ESTIMATORS
    step: float = 100.0  # h of the dipole (large on purpose: the published NADs use 100)
    n_networks: int = 10000  # random initialisations, as the NAD paper's scripts
    n_points: int = 1  # evaluation points x0 ~ N(0, I); the covariance is pooled over them
    seed: int = 0  # seeds x0 and every network's initialisation
    batch_size: int = 1024  # forward passes per chunk of the dipole (bounds memory)
    networks_per_chunk: int = 64  # networks stacked together (bounds memory)
    windowed: bool = True  # dipole: carry each probe's change as a window (nadpipe.dipole)
    top_k: int | None = None  # how many NADs to keep (None: all d); > 4096 inputs need it
    # dipole: a chunk's networks as one grouped network (nadpipe.grouped): "auto" on an
    # accelerator, where one network after another is bound by kernel launches; True; False.
    # Left out of the job spec at its default: no existing NADs are recomputed
    grouped: bool | str = field(default="auto", metadata={OMIT_DEFAULT: True})

    def __post_init__(self) -> None:
        if self.grouped not in (True, False, "auto"):
            raise ValueError(f"grouped must be auto, true or false, got {self.grouped!r}")

        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"estimator must be one of {', '.join(ESTIMATORS)}, got {self.estimator!r}"
            )


# above this many coordinates the d x d covariance is not formed: NADs come from the Gram
# matrix of the sensitivities, and top_k must say how many are wanted
MAX_FULL_D = 4096
MAX_SENSITIVITY_BYTES = 2**40  # the sensitivities of all networks, float64: 1 TiB at most
MIN_NETWORKS = 22  # two halves of 11 networks: the split-half overlap at k = 10 needs rank 10


@dataclass(frozen=True)
class NadConfig(NadSettings):
    """The `nads` block: the settings above and the convergence warning's threshold."""

    min_overlap_top10: float = 0.5  # warn below this split-half top-10 overlap
    networks_per_shard: int | None = None  # shards of this many networks (nadpipe.shards)
    until_converged: bool = False  # add shards until min_overlap_top10; n_networks the ceiling

    def compute(self) -> NadSettings:
        """What the NADs are computed with (the warning threshold is not part of it)."""
        return NadSettings(**{f.name: getattr(self, f.name) for f in fields(NadSettings)})


PRECISIONS = ("auto", "fp32", "bf16")  # TrainSettings.precision


@dataclass(frozen=True)
class TrainSettings:
    """How one model (or a seed ensemble) is trained: SGD with a per-step learning rate."""

    epochs: int = 50  # underspecification paper: 50 for MLP and LeNet, 30 for ResNet-18
    lr_max: float = 0.2  # peak learning rate
    lr_schedule: str = "triangular"  # "triangular" 0 -> lr_max -> 0; "linear_decay" lr_max -> 0
    momentum: float = 0.9  # SGD momentum (the NAD paper's code: 0)
    weight_decay: float = 0.0  # SGD weight decay (L2)
    batch_size: int = 128
    grad_clip: float | None = 0.5  # max gradient norm per step, as the NAD code does; None: off
    bf16: bool = False  # bf16 autocast on an accelerator (what precision auto does there)
    channels_last: bool = False  # channels-last memory format, on CUDA only
    compile: bool = False  # torch.compile the model (pays off only for long runs)
    fail_on_divergence: bool = False  # raise on a NaN/inf loss instead of recording it
    # "auto": bf16 autocast on an accelerator (tensor cores), float32 on the CPU; "fp32": float32
    # everywhere; "bf16": bf16 autocast wherever torch has it, the CPU too (to check that it
    # changes no finding). Left out of the job spec at its default: no existing cell reruns
    precision: str = field(default="auto", metadata={OMIT_DEFAULT: True})

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.lr_schedule not in ("triangular", "linear_decay"):
            raise ValueError(
                f"lr_schedule must be 'triangular' or 'linear_decay', got {self.lr_schedule!r}"
            )


def per_model(settings: TrainSettings) -> bool:
    """Whether the training asks for channels-last or compile: settings of one model, not of a
    vmap, so its models train one after another (and its cells are not batched)."""
    return settings.channels_last or settings.compile


@dataclass(frozen=True)
class CrossSection:
    n_points: int = 2  # test points with a cross-section each (the figure shows the first)
    range: float = 3.0  # half-width of the plane in units of eps (eps1 along v1, eps2 along v2)
    resolution: int = 41  # R: the plane is sampled on an R x R grid
    pairs: tuple[tuple[int, int], ...] | None = None  # (i, j) pairs in the figure; None: all


@dataclass(frozen=True)
class Transitions:
    n_trajectories: int = 10  # closed ellipses of each kind: same class, other class, random
    n_points: int = 256  # points k along each ellipse


@dataclass(frozen=True)
class NadBands:
    """Test accuracy with the inputs' components along bands of NADs removed."""

    enabled: bool = False
    bands: tuple[tuple[int, int], ...] = ((0, 9), (10, 49), (50, 199), (200, 1023))


@dataclass(frozen=True)
class AnalysisSettings:
    """The per-model measures computed after training (changing them never retrains)."""

    n_points: int = 200  # test (and as many train) points for reliance, margins, Jacobian norm
    batch_size: int = 1000  # points per forward/backward pass
    margin_max: float = 10.0  # largest distance searched for the boundary (input units)
    margin_steps: int = 200  # grid steps of that search on each side (then interpolation)
    seed: int = 0  # seeds the random trajectories
    cross_section: CrossSection = CrossSection()
    transitions: Transitions = Transitions()
    nad_bands: NadBands = NadBands()


@dataclass(frozen=True)
class CifarSettings:
    """Where CIFAR-10 is and how its images are prepared."""

    root: str = "data/cifar10"  # holds cifar-10-batches-py/ (the python version)
    download: bool = False  # download it with torchvision when missing (needs internet)
    verify_md5: bool = True  # check the official md5 sums (off: other CIFAR-format data)
    n_train: int | None = None  # the first n training images (None: all 50 000)
    n_test: int | None = None  # the first n test images (None: all 10 000)
    normalize: bool = True  # per-channel (x - mean) / std of the [0, 1] images
    mean: tuple[float, ...] = (0.4914, 0.4822, 0.4465)
    std: tuple[float, ...] = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class CifarData:
    """What the CIFAR-10 tensors of a study depend on: where the files are, which images, and
    the per-channel normalisation (None: images stay in [0, 1])."""

    root: str = "data/cifar10"
    verify_md5: bool = True
    n_train: int | None = None
    n_test: int | None = None
    mean: tuple[float, ...] | None = (0.4914, 0.4822, 0.4465)
    std: tuple[float, ...] | None = (0.2470, 0.2435, 0.2616)

    @classmethod
    def of(cls, s: CifarSettings) -> CifarData:
        """From the `cifar10` block."""
        mean, std = (s.mean, s.std) if s.normalize else (None, None)
        return cls(s.root, s.verify_md5, s.n_train, s.n_test, mean, std)


@dataclass(frozen=True)
class GpuSettings:
    """Where the jobs compute (nadpipe.backend) and how GPU jobs share the GPUs
    (nadpipe.runner.slots)."""

    device: str = "auto"  # "auto": CUDA when torch sees a GPU, else the CPU; "cpu"; "cuda"
    slots: int | None = None  # GPU jobs at once; None: --resources gpu=N, else GPUs x jobs_per_gpu
    jobs_per_gpu: int = 1  # GPU jobs sharing one GPU when --resources gpu=N is not given
    lock_dir: str = ".nadpipe/gpu_slots"  # the pool's lock files
    cudnn_benchmark: bool = True  # cuDNN picks the fastest convolution algorithms
    deterministic: bool = False  # deterministic CUDA algorithms: bit-equal reruns and resumes
    tf32: bool = False  # TF32 float32 matmuls and convolutions on CUDA (faster, 10-bit mantissa)
    batch_cells: int | None = None  # grid cells trained together; None: 64 on a GPU, 1 on a CPU

    def backend(self):  # -> nadpipe.backend.Backend

        return Backend(
            self.device, self.deterministic, self.tf32, self.cudnn_benchmark, self.batch_cells
        )


@dataclass(frozen=True)
class Architecture:
    """A named architecture: a model and where its NADs come from."""

    model: str = ""  # registry name or "package.module:callable"; "" = the entry's name
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the builder
    shape: Shape = DEFAULT_SHAPE  # input (C, H, W) of its NAD networks
    nads_from: str | None = None  # use another architecture's NADs
    nads_file: str | None = None  # read the NADs from a file (.npy/.npz/.pt, rows = NADs)
    # overrides of the `nads` block
    nads: dict[str, Any] = field(default_factory=dict, metadata={"block": NadConfig})


# -- the studies' blocks: what every study has, then what each has of its own ----------------


@dataclass(frozen=True)
class StudySettings:
    enabled: bool = False
    architectures: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)  # each seeds one run: data, initialisation, batch order
    group_seeds: bool = False  # train all seeds of a cell in one job (a batched ensemble)
    eval_batch_size: int = 2000  # samples per forward pass in evaluation
    train: TrainSettings = TrainSettings()
    # per architecture, overrides of `train`
    train_per_arch: dict[str, dict[str, Any]] = field(
        default_factory=dict, metadata={"block": dict[str, TrainSettings]}
    )
    # named protocols, one more axis of the grid: name -> overrides of the study's data keys
    # (eps, sigma, n_train, ...) and of `train`; none: the study's own settings, one protocol
    protocols: dict[str, dict[str, Any]] = field(default_factory=dict)

    def train_for(self, arch: str, protocol: str = "") -> TrainSettings:
        """The training of `arch` under `protocol`: `train`, then train_per_arch, then the
        protocol's own `train`."""
        train = replace(self.train, **self.train_per_arch.get(arch, {}))
        return replace(train, **self.protocols.get(protocol, {}).get("train", {}))

    def with_protocol(self, protocol: str) -> StudySettings:
        """These settings with `protocol`'s data keys put in ("" : as they are)."""
        data = {k: v for k, v in self.protocols.get(protocol, {}).items() if k != "train"}
        return replace(self, **data)


@dataclass(frozen=True)
class NadPairsSettings(StudySettings):
    """D(v1) (+) D(v2), v1 = NAD i and v2 = NAD j (underspecification paper, Sec. 3)."""

    enabled: bool = True
    architectures: tuple[str, ...] = ("mlp", "lenet")
    seeds: tuple[int, ...] = (0, 1, 2)
    indices: tuple[int, ...] = (0, 5, 10, 50, 100, 200, 400, 600, 800, 1023)  # every (i, j)
    eps1: float = 1.0  # margin of channel 1
    eps2: float = 0.5  # margin of channel 2
    sigma: float = 1.0  # noise std orthogonal to v, both channels
    n_train: int = 10000
    n_test: int = 10000


@dataclass(frozen=True)
class CifarNadSettings(StudySettings):
    """Binary CIFAR-10 (+) D(NAD k) (underspecification paper, Sec. 4; App. A.2)."""

    architectures: tuple[str, ...] = ("mlp", "lenet", "resnet18")
    indices: tuple[int, ...] = (0, 10, 100, 500, 1000)
    eps: float = 1.0  # margin of the synthetic channel
    sigma: float = 3.0  # its noise std orthogonal to v
    sigma_per_arch: dict[str, float] = field(default_factory=lambda: {"lenet": 1.0})
    train: TrainSettings = TrainSettings(epochs=40, lr_max=0.15, weight_decay=1e-5, grad_clip=None)
    train_per_arch: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"mlp": {"epochs": 60}},
        metadata={"block": dict[str, TrainSettings]},
    )


@dataclass(frozen=True)
class PoisonSettings(StudySettings):
    """CIFAR-10 whose training images carry a class code along NADs i, i+1 (NAD paper)."""

    architectures: tuple[str, ...] = ("resnet18",)
    indices: tuple[int, ...] = (0, 100, 500, 1000)  # poisoned NAD index i (carriers i, i+1)
    eps: float = 0.05  # carrier coefficient in [0, 1] pixel units
    train: TrainSettings = TrainSettings(epochs=50, lr_max=0.21, weight_decay=5e-4, grad_clip=None)


@dataclass(frozen=True)
class FlipSettings(StudySettings):
    """CIFAR-10 with each channel's NAD coefficients reversed, against the original."""

    architectures: tuple[str, ...] = ("lenet", "resnet18")
    train: TrainSettings = TrainSettings(epochs=50, lr_max=0.1, weight_decay=5e-4, grad_clip=None)


# the NAD paper's training (its code's utils.train): SGD without momentum, lr 0.5 falling
# linearly to 0 over 20 epochs, per step, gradient norm clipped at 0.5
NAD_PAPER_TRAIN = TrainSettings(
    epochs=20, lr_max=0.5, lr_schedule="linear_decay", momentum=0.0, grad_clip=0.5
)


@dataclass(frozen=True)
class Reference:
    """A published curve or map that a study's results are drawn beside and compared with
    (nadpipe.references): a CSV."""

    file: str = ""  # the CSV
    column: str | None = None  # its accuracy column; null: a headerless size x size map (Fourier)
    index: str = "index"  # single_direction: the column of NAD indices
    a: str = "x"  # fourier: the columns of the frequencies a (rows) and b (columns)
    b: str = "y"
    offset: int = 0  # fourier: added to a and b (the NAD paper's dft_accuracies.csv: -8)
    scale: int = 1  # fourier: a and b multiplied by it after the offset (dft_accuracies.csv: 2)


@dataclass(frozen=True)
class SingleDirectionSettings(StudySettings):
    """One D(NAD k) per model, k over the NAD index (NAD paper)."""

    architectures: tuple[str, ...] = ("lenet", "lenet_nopool")
    indices: tuple[int, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200, 400, 600, 800, 1000, 1023)
    eps: float = 0.5  # x = eps y v + w: the NAD code's epsilon = 1 in +-(epsilon / 2) v
    sigma: float = 3.0
    n_train: int = 10000
    n_test: int = 10000
    train: TrainSettings = NAD_PAPER_TRAIN
    references: dict[str, dict[str, Any]] = field(default_factory=dict)  # arch -> Reference


@dataclass(frozen=True)
class FourierSettings(StudySettings):
    """One D(Fourier direction (a, b)) per model (NAD paper, Fig. 1)."""

    architectures: tuple[str, ...] = ("lenet", "lenet_nopool")
    size: int = 16  # size x size frequencies, one training each
    layout: str = "grid"  # "grid": a, b = 0..size-1; "centered": -size/2..size/2-1 (times step)
    step: int = 1  # cycles per image between neighbouring cells (the NAD paper's map: 2)
    eps: float = 0.5
    sigma: float = 3.0
    n_train: int = 10000
    n_test: int = 10000
    train: TrainSettings = NAD_PAPER_TRAIN
    references: dict[str, dict[str, Any]] = field(default_factory=dict)  # arch -> Reference


# the top-level blocks besides the studies
BLOCKS: dict[str, type] = {
    "nads": NadConfig,
    "analysis": AnalysisSettings,
    "cifar10": CifarSettings,
    "gpus": GpuSettings,
}


def defaults(cls: type) -> dict[str, Any]:
    """The defaults of a settings class as plain data (nested blocks as dicts, tuples as
    lists), as they appear in a resolved config."""
    return plain(cls())


def plain(value: Any) -> Any:
    """Settings as YAML-ready data: dataclasses -> dicts, tuples -> lists."""
    if is_dataclass(value):
        kept = [
            f
            for f in fields(value)
            if not (f.metadata.get(OMIT_DEFAULT) and getattr(value, f.name) == f.default)
        ]
        return {f.name: plain(getattr(value, f.name)) for f in kept}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def typed(cls: Any, data: Any) -> Any:
    """`data` as plain data (`plain`'s output) turned back into an instance of `cls`, a type
    hint: dataclasses, named tuples, `X | None`, tuples and dicts, recursively. Jobs receive
    their settings as plain data, which Snakemake can compare (it ignores other objects)."""

    origin, args = typing.get_origin(cls), typing.get_args(cls)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return typed(inner[0], data)
    if is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        return cls(
            **{
                f.name: typed(hints[f.name], data[f.name])
                for f in fields(cls)
                if f.init and f.name in data
            }
        )
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return cls(*data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(typed(args[0], x) for x in data)
        if args:
            return tuple(typed(a, x) for a, x in zip(args, data, strict=True))
        return tuple(data)
    if origin is dict:
        return dict(data)
    if cls is tuple:
        return tuple(data)
    if cls is float and isinstance(data, int):
        return float(data)
    return data
