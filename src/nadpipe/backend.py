"""Where a job's tensors live and how its kernels run: decided once, here.

The device rule:
- A job (nadpipe.jobs, the `nadpipe nads` command) calls `setup` once, before it makes a tensor.
  It chooses the device (`gpus.device`: "auto" = CUDA when torch sees a GPU, else the CPU) and
  sets every backend switch the config states (cuDNN benchmark, deterministic algorithms, TF32).
- Below the job nothing chooses a device: a new tensor takes its device from a tensor it will
  meet (`device=x.device`, `zeros_like(x)`, a model's parameters) or from its generator.
- Data and models are born on the CPU by design (`on_cpu`): seeded CPU generators give the same
  bytes on every machine. The job moves them to its device once; results come back to the CPU
  once, as numbers or arrays, just before they are written.
- A job that was given a GPU (a slot of nadpipe.runner.slots, or SLURM's CUDA_VISIBLE_DEVICES) and
  finds no CUDA stops with a message instead of running on the CPU, unless `gpus.device: cpu`.

tests/test_device.py runs every job under `torch.device("meta")`: a tensor made without a device
anywhere below a job lands on the meta device and fails as soon as it meets a real one.

The Snakefile passes the `gpus` block's switches to the jobs through the environment (the
run's one variable, nadpipe.io.RUN_ENV, like the slot pool), so changing them reruns nothing;
each training record and summary row states the device and switches it ran with.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from .io import run_values

DEVICES = ("auto", "cpu", "cuda")
CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for deterministic results (CUDA >= 10.2)


class DeviceError(RuntimeError):
    """The device the job was given or asked for cannot be used; the message says what to do."""


@dataclass(frozen=True)
class Backend:
    """The `gpus` block's switches that decide how a job computes."""

    device: str = "auto"
    deterministic: bool = False
    tf32: bool = False
    cudnn_benchmark: bool = True
    batch_cells: int | None = None  # cells trained together (nadpipe.batching); None: by device

    def batch_size(self, accelerator: bool) -> int:
        """How many cells train together: `batch_cells`, else 64 on an accelerator and 1 on the
        CPU (where an ensemble is no faster per sample than one model)."""
        if self.batch_cells is not None:
            return self.batch_cells
        return 64 if accelerator else 1

    def __post_init__(self) -> None:
        if self.device not in DEVICES and not _other_device(self.device):
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")

    def to_env(self) -> str:
        """The run's variable (nadpipe.io.RUN_ENV) with these switches: what a job is handed."""
        return json.dumps({**run_values(), "backend": asdict(self)}, sort_keys=True)

    @classmethod
    def from_env(cls) -> Backend:
        """The switches the Snakefile set for this job; the defaults outside the workflow."""
        given = run_values().get("backend")
        return cls(**given) if given else cls()


def accelerated(device) -> bool:
    """Whether `device` is an accelerator: the one test of every branch a GPU takes (cells
    batched, NAD networks together and born there, bf16, channels-last). Any device but the
    CPU, so that the test suite's stand-in accelerator takes the same branches as CUDA."""
    # deferred: it loads torch, which importing backend does not
    import torch

    return torch.device(device).type != "cpu"


def _other_device(name: str) -> bool:
    """Whether `name` is a device type torch has a module for that says it is available (an
    out-of-tree backend such as the test suite's stand-in); not one of the config's choices."""

    if name in DEVICES or "torch" not in sys.modules:
        return False
    # deferred: it loads torch, which importing backend does not
    import torch

    module = getattr(torch, name, None)
    try:
        torch.device(name)
        return bool(module is not None and module.is_available())
    except (RuntimeError, AttributeError):
        return False


def _given_gpu() -> str | None:
    """The GPU(s) this process was given (CUDA_VISIBLE_DEVICES naming a device), else None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return visible if visible and visible != "-1" else None


def _no_cuda_reason() -> str:
    # deferred: it loads torch, which importing backend does not
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU or driver"


def choose_device(name: str = "auto", flag: str = "gpus.device"):  # -> torch.device
    """The device of a job: `name` ("auto", "cpu", "cuda"); `flag` is how the interface names
    the setting in its messages (a config key or a command-line flag)."""
    # deferred: it loads torch, which importing backend does not
    import torch

    if _other_device(name):
        return torch.device(name, 0)
    if name not in DEVICES:
        raise DeviceError(f"{flag}: {name!r} is not a device; use one of {', '.join(DEVICES)}")
    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    given = _given_gpu()
    if name == "cuda":
        raise DeviceError(
            f"{flag} asks for CUDA, but {_no_cuda_reason()}; use {flag} cpu (or auto) to run "
            "on the CPU"
        )
    if given is not None:  # a GPU slot or SLURM gave this job a GPU that torch cannot use
        raise DeviceError(
            f"this job was given GPU {given} (CUDA_VISIBLE_DEVICES={given}), but "
            f"{_no_cuda_reason()}; it would silently run on the CPU. Fix the GPU or the torch "
            f"build, or set {flag}: cpu to run on the CPU on purpose"
        )
    return torch.device("cpu")


def autocast_available(device) -> bool:
    """Whether bf16 autocast runs on `device`: torch has autocast for its type and, for a
    backend of its own (PrivateUse1), that backend says bf16 is supported (else autocast
    turns itself off with a warning, while the record would say bf16)."""
    # deferred: it loads torch, which importing backend does not
    import torch

    if not torch.amp.is_autocast_available(device.type):
        return False
    if device.type in ("cpu", "cuda"):
        return True
    supported = getattr(getattr(torch, device.type, None), "get_amp_supported_dtype", None)
    return supported is not None and torch.bfloat16 in supported()


def autocast_in_effect(device) -> str:
    """The autocast dtype in effect for `device` where this is called ("bfloat16"), or "off":
    what a training step ran with, observed inside it (the record states this, not the
    config). torch before 2.4 asks per device kind."""
    # deferred: it loads torch, which importing backend does not
    import torch

    kind = torch.device(device).type
    try:
        on, dtype = torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
    except TypeError:  # torch < 2.4: no device argument
        on = torch.is_autocast_cpu_enabled() if kind == "cpu" else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if kind == "cpu" else torch.get_autocast_gpu_dtype()
    return str(dtype).removeprefix("torch.") if on else "off"


def setup(backend: Backend | None = None, flag: str = "gpus.device"):  # -> torch.device
    """Decide the job's device and set its backend switches (see the module's rule); returns the
    device. Called once per job, before any tensor is made."""
    # deferred: it loads torch, which importing backend does not
    import torch

    keep_freed_memory()
    backend = backend or Backend.from_env()
    device = choose_device(backend.device, flag)
    if backend.deterministic and device.type == "cuda":
        deterministic_cublas()
    if torch.are_deterministic_algorithms_enabled() != backend.deterministic:
        # only when it changes: the call imports torch._dynamo (2 s a job on a CPU)
        torch.use_deterministic_algorithms(backend.deterministic)
    torch.backends.cudnn.deterministic = backend.deterministic
    torch.backends.cudnn.benchmark = backend.cudnn_benchmark and not backend.deterministic
    _set_tf32(backend.tf32)
    return device


# glibc's mallopt options and the values `keep_freed_memory` sets: below 32 MiB (glibc's
# largest threshold) from the heap, not from mmap; freed memory kept until 1 GiB of it is
# free; the heap grown 64 MiB at a time
MALLOPT = ((-3, 32 << 20), (-1, 1 << 30), (-2, 64 << 20))  # M_MMAP_THRESHOLD, M_TRIM, M_TOP_PAD


def glibc_version() -> tuple[int, ...] | None:
    """This process's glibc as (major, minor); None where the C library is another."""
    try:
        name, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()
    except (ValueError, OSError, AttributeError):  # no such name, or no value: not glibc
        return None
    return tuple(int(x) for x in version.split(".")[:2]) if name == "glibc" else None


def keep_freed_memory() -> None:
    """Let this process reuse the memory its tensors free (glibc only; elsewhere nothing). A
    NAD chunk's and a training step's buffers of a few MiB are freed and made again at every
    step, and glibc's defaults give many back to the system, so each new one is faulted in
    page by page: `nadpipe nads` of LeNet's 300 networks took 1.38 million page faults, 34 000
    with this, and 1.4 times as long (docs/speed.md). Called by `setup`, so once in every job."""
    if glibc_version() is None:
        return

    libc = ctypes.CDLL(None)
    for option, value in MALLOPT:
        libc.mallopt(option, value)


DETERMINISTIC_WORKSPACES = (":4096:8", ":16:8")  # what cuBLAS accepts as deterministic


def deterministic_cublas(key: str = "gpus.deterministic") -> None:
    """Make cuBLAS deterministic in this process, or refuse: it reads CUBLAS_WORKSPACE_CONFIG
    when it starts, so a process that started CUDA without it (the Python API after other CUDA
    work, a notebook) cannot be made deterministic any more, while its records would say it
    was. The workflow's jobs have it in their environment from the start (nadpipe.runner)."""
    # deferred: it loads torch, which importing backend does not
    import torch

    now = os.environ.get("CUBLAS_WORKSPACE_CONFIG") in DETERMINISTIC_WORKSPACES
    if now and not torch.cuda.is_initialized():
        return
    # CUDA started: deterministic only if the variable was there before, which the process's
    # starting environment shows (set later, as os.environ[...] = after CUDA work, it is too late)
    if now and _started_with("CUBLAS_WORKSPACE_CONFIG") in (*DETERMINISTIC_WORKSPACES, None):
        return
    if torch.cuda.is_initialized():
        raise DeviceError(
            f"{key} is set, but this process started CUDA before CUBLAS_WORKSPACE_CONFIG was "
            f"set to one of {', '.join(DETERMINISTIC_WORKSPACES)}, so cuBLAS is not "
            f"deterministic here. Start Python with CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} "
            f"in its environment (e.g. CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} python ...)"
        )
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


def _started_with(name: str) -> str | None:
    """The value of the environment variable `name` when this process started ("" when it was
    not set then); None where the system does not say (no /proc)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            start = f.read().split(b"\0")
    except OSError:
        return None
    key = name.encode() + b"="
    return next((v[len(key) :].decode() for v in start if v.startswith(key)), "")


def _set_tf32(on: bool) -> None:
    """TF32 for float32 matmuls and cuDNN convolutions and RNNs on or off (torch's own default
    has it on for convolutions), through torch's long-standing flags alone: torch >= 2.9 raises
    when a program reads these flags after the newer `fp32_precision` switches were set ("a mix
    of the legacy and new APIs"), which user models, libraries and inductor's autotuning do; set
    this way, both the flags and the switches read back what was set (tests/test_device.py)."""
    # deferred: it loads torch, which importing backend does not
    import torch

    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def facts(device, backend: Backend | None = None) -> dict:
    """What a record and a summary row state about how the job computed."""
    # deferred: it loads torch, which importing backend does not
    import torch

    backend = backend or Backend.from_env()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {"device": name, "deterministic": backend.deterministic, "tf32": backend.tf32}


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """Make tensors on the CPU inside the block, whatever the default device: where data and
    models are born (seeded CPU generators: the same bytes on every machine)."""
    # deferred: it loads torch, which importing backend does not
    import torch

    with torch.device("cpu"):
        yield


_BIRTH: contextvars.ContextVar = contextvars.ContextVar("nadpipe_birth_device", default=None)


@contextlib.contextmanager
def born_on(device) -> Iterator[None]:
    """Models built in the block (nadpipe.models.build, and any builder that makes its tensors
    without naming a device) are made and initialised on `device`: where many networks are
    drawn for the NADs, so that none is copied across tensor by tensor."""
    # deferred: it loads torch, which importing backend does not
    import torch

    token = _BIRTH.set(torch.device(device))
    try:
        with torch.device(device):
            yield
    finally:
        _BIRTH.reset(token)


def birth_device():  # -> torch.device
    """Where a model is built: the CPU (the same numbers on every machine), or the device of
    an enclosing `born_on`."""
    # deferred: it loads torch, which importing backend does not
    import torch

    return _BIRTH.get() or torch.device("cpu")


def cuda_rng_state() -> list:
    """Every CUDA generator's state (empty where CUDA is not in use), for checkpoints."""
    # deferred: it loads torch, which importing backend does not
    import torch

    return torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []


def set_cuda_rng_state(states: list) -> None:
    # deferred: it loads torch, which importing backend does not
    import torch

    if states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states)
