"""A stand-in accelerator: a device that computes on the CPU, is neither the CPU nor torch's
default device, and keeps a record of what a GPU would make expensive or refuse.

Tensors "on" it are `StandIn` wrappers (a `__torch_dispatch__` tensor subclass) around CPU
tensors; a dispatch mode runs every operation on the wrapped CPU tensors, so the numbers are
real. While the mode is on, as CUDA would:
- an operation that meets a stand-in tensor and a CPU tensor of one or more dimensions raises
  (0-dim CPU tensors are scalars, allowed; so are CPU index tensors, as CUDA allows them, each
  counted as the host-to-device copy CUDA makes of it);
- a CPU generator given to a random operation on the device raises;
and it counts, in `Record`:
- host-to-device copies (`.to`, `copy_`, `torch.tensor(data, device=...)`; of one element
  apart, as batch norm's step counter) and device-to-host copies (`.cpu()`, `.to`, `copy_`),
- synchronising reads: `.item()`, `float()`, `bool()`, `.tolist()`, `nonzero`, boolean-mask
  indexing, `masked_select`, `unique`, and any read of a device tensor's data to the host,
each with the innermost frame of nadpipe that asked for it.

The device is PyTorch's PrivateUse1 backend renamed "standin", with a device module that says it
is available, so `torch.device("standin")` passes wherever a device is named and the code takes
its accelerator branches (`nadpipe.backend.accelerated`). Autocast is not available on it: bf16
is one of the settings "the backend does not allow" and is recorded as off.
"""

from __future__ import annotations

import contextlib
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

NAME = "standin"
aten = torch.ops.aten


class _Module:
    """What torch asks of a device's module (torch.<name>)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:  # its random numbers come from the CPU's generator
        pass

    @staticmethod
    def get_rng_state_all() -> list:
        return []


# Why the stand-in is not registered where CUDA is: PyTorch takes one accelerator per process,
# and a registered PrivateUse1 backend is it (torch.accelerator.current_accelerator() says
# "standin"), so CUDA's autograd then looks for its streams on the stand-in and fails
# ("opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED": every backward pass of the
# gpu-marked tests on an NVIDIA H100 at 1f01ad7, torch 2.11). It cannot go without its hooks
# (its own backward fails) nor come later (autograd sizes its device queues at its first
# backward pass). So it is registered when this module is imported (conftest, before any test)
# on a machine without CUDA, and a test that needs it is skipped on one with CUDA, where the
# real device checks what it stands in for (the gpu-marked tests).
WITH_CUDA = (
    "the stand-in accelerator cannot share a process with CUDA (PyTorch takes one accelerator "
    "per process; tests/standin.py): on a GPU machine the gpu-marked tests check the real device"
)


def _register() -> None:
    """PrivateUse1 as a Python backend named NAME: its device module, hooks and device guard
    (autograd asks for a guard), once per process, where there is no CUDA."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() != NAME and not torch.cuda.is_available():
        _setup_privateuseone_for_python_backend(rename=NAME, backend_module=_Module())


_register()
# PrivateUse1, named NAME where registered (torch.device(NAME) would not parse where it is not)
DEVICE = torch.device("privateuseone", 0)


def require() -> torch.device:
    """The stand-in device; skips the test where it is not registered (WITH_CUDA)."""
    if torch._C._get_privateuse1_backend_name() != NAME:
        import pytest

        pytest.skip(WITH_CUDA)
    return DEVICE


CPU = torch.device("cpu")

# reads that wait for the device: the host needs the value
SYNC = {
    aten._local_scalar_dense.default,
    aten.item.default,  # inference mode does not decompose it to the above
    aten.is_nonzero.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.equal.default,
}
SYNC_PACKETS = {"unique", "_unique", "_unique2", "unique_dim", "unique_consecutive"}


@dataclass
class Record:
    """What crossed between host and device, and where the host waited."""

    h2d: list[str] = field(default_factory=list)
    h2d_scalars: list[str] = field(default_factory=list)  # one element: torch.tensor(0, ...)
    d2h: list[str] = field(default_factory=list)
    syncs: list[str] = field(default_factory=list)
    ops: Counter = field(default_factory=Counter)

    def clear(self) -> None:
        self.h2d.clear()
        self.h2d_scalars.clear()
        self.d2h.clear()
        self.syncs.clear()
        self.ops.clear()


class DeviceMixError(RuntimeError):
    """What CUDA raises where a stand-in tensor meets a CPU tensor or a CPU generator."""


def _where() -> str:
    """The innermost frame of nadpipe (else of the tests) that led here."""
    frames = traceback.extract_stack()[:-3]
    for wanted in ("/nadpipe/", "/tests/"):
        for f in reversed(frames):
            if wanted in f.filename and "standin" not in f.filename:
                return f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
    return "?"


class StandIn(torch.Tensor):
    """A tensor on the stand-in device: a CPU tensor inside, reported as on `DEVICE`."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        assert type(inner) is torch.Tensor and inner.device.type == "cpu"
        with torch.inference_mode(False):  # a wrapper made under inference mode cannot be
            return cls._make(inner)  # the view that autograd's view bookkeeping asks for

    @classmethod
    def _make(cls, inner: torch.Tensor):
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )
        out.inner = inner
        return out

    def __repr__(self) -> str:  # the data are the device's: printing them would read them
        return f"StandIn(shape={tuple(self.shape)}, dtype={self.dtype})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # `t[idx] = 1`: torch's indexing makes the scalar a tensor on the device below the
        # dispatch modes, which a Python backend cannot serve; a 0-dim CPU tensor is what CUDA
        # accepts as a scalar there
        # (and index lists likewise: CPU index tensors, as CUDA accepts)
        if func in (torch.Tensor.__setitem__, torch.Tensor.__getitem__):
            idx = args[1]
            if isinstance(idx, list):
                args = (args[0], torch.tensor(idx), *args[2:])
            elif isinstance(idx, tuple) and any(isinstance(i, list) for i in idx):
                idx = tuple(torch.tensor(i) if isinstance(i, list) else i for i in idx)
                args = (args[0], idx, *args[2:])
            if func is torch.Tensor.__setitem__ and not isinstance(args[2], torch.Tensor):
                args = (args[0], args[1], torch.tensor(args[2], dtype=args[0].dtype))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _ACTIVE is None:
            raise RuntimeError(f"{func}: a stand-in tensor used outside the stand-in's mode")
        return _ACTIVE.run(func, args, kwargs or {})

    # pickling a device tensor is what torch.save does: say so rather than write a subclass
    def __reduce_ex__(self, protocol):
        raise DeviceMixError(
            f"a tensor on {DEVICE} written to a file at {_where()}: results must come back to "
            "the CPU before they are written (nadpipe.backend's device rule)"
        )


def _is_device(x) -> bool:
    return isinstance(x, StandIn)


def _device_of(value) -> torch.device | None:
    if value is None:
        return None
    return torch.device(value) if not isinstance(value, torch.device) else value


_ACTIVE: StandInMode | None = None


class StandInMode(TorchDispatchMode):
    """Runs every operation on the stand-in device's CPU tensors (see the module)."""

    def __init__(self, record: Record):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.run(func, args, kwargs or {})

    def _h2d(self, src: torch.Tensor | None = None) -> None:
        scalar = src is not None and src.numel() == 1
        (self.record.h2d_scalars if scalar else self.record.h2d).append(_where())

    def _d2h(self) -> None:
        self.record.d2h.append(_where())

    def run(self, func, args, kwargs):
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        on_device = any(_is_device(t) for t in tensors)
        target = _device_of(kwargs.get("device"))
        wants_device = target is not None and target.type == NAME
        self.record.ops[func.__name__] += 1

        # copies between host and device: _to_copy, and `to` itself, which inference mode
        # does not decompose (its device.. overload names the device positionally)
        if func._overloadpacket in (aten._to_copy, aten.to):
            if target is None:
                target = next((a for a in args[1:] if isinstance(a, torch.device)), None)
                wants_device = target is not None and target.type == NAME
        if func._overloadpacket in (aten._to_copy, aten.to) and target is not None:
            src = args[0]
            rest = [CPU if isinstance(a, torch.device) else a for a in args[1:]]
            kw = {**kwargs, "device": CPU} if "device" in kwargs else kwargs
            if wants_device and not _is_device(src):
                self._h2d(src)
                return StandIn(func(src, *rest, **kw).clone())
            if not wants_device and _is_device(src):
                self._d2h()
                return func(src.inner, *rest, **kw).clone()
        if func is aten.copy_.default:
            dst, src = args[0], args[1]
            if _is_device(dst) != _is_device(src):
                if _is_device(dst):
                    self._h2d(src)
                    dst.inner.copy_(src, *args[2:], **kwargs)
                    return dst
                self._d2h()
                dst.copy_(src.inner, *args[2:], **kwargs)
                return dst

        # what CUDA refuses
        if on_device or wants_device:
            mixed = [
                t for t in tensors if not _is_device(t) and t.device.type == "cpu" and t.dim() > 0
            ]
            if mixed and self._cpu_index_allowed(func, args, mixed):
                for index in mixed:  # CUDA copies them over first: a copy like any other
                    self._h2d(index)
            elif mixed:
                raise DeviceMixError(
                    f"{func}: a CPU tensor of shape {tuple(mixed[0].shape)} meets tensors on "
                    f"{DEVICE} at {_where()} (CUDA: 'Expected all tensors to be on the same "
                    "device')"
                )
            gen = kwargs.get("generator")
            if gen is not None and gen.device.type == "cpu":
                raise DeviceMixError(
                    f"{func}: a CPU generator given to a random operation on {DEVICE} at "
                    f"{_where()} (CUDA: 'Expected a 'cuda' device type for generator')"
                )
            if func in SYNC or func._overloadpacket.__name__ in SYNC_PACKETS:
                self.record.syncs.append(f"{func.__name__} at {_where()}")
            elif func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
                idx = args[1]
                if any(i is not None and i.dtype == torch.bool for i in idx):
                    self.record.syncs.append(f"boolean-mask indexing at {_where()}")

        def unwrap(x):
            if _is_device(x):
                return x.inner
            if isinstance(x, torch.device) and x.type == NAME:
                return CPU
            return x

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        if not (on_device or wants_device):
            return out
        if func._schema.returns and func in SYNC and not isinstance(out, torch.Tensor):
            return out  # a Python number: the host has it

        def wrap(x):
            if isinstance(x, torch.Tensor) and not _is_device(x) and x.device.type == "cpu":
                return StandIn(x)
            return x

        # in-place and out= operations return their (wrapped) argument
        if func._schema.returns and any(r.alias_info and r.alias_info.is_write
                                        for r in func._schema.returns):  # fmt: skip
            flat_args = list(args) + list(kwargs.values())
            for a in flat_args:
                if _is_device(a) and isinstance(out, torch.Tensor) and a.inner is out:
                    return a
        return tree_map(wrap, out)

    @staticmethod
    def _cpu_index_allowed(func, args, mixed) -> bool:
        """CUDA accepts CPU index tensors for advanced indexing."""
        if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            return all(any(m is i for i in args[1] if i is not None) for m in mixed)
        return False

    def __enter__(self):
        global _ACTIVE
        self._previous = _ACTIVE
        _ACTIVE = self
        return super().__enter__()

    def __exit__(self, *exc):
        global _ACTIVE
        _ACTIVE = self._previous
        return super().__exit__(*exc)


class _FromData(TorchFunctionMode):
    """`torch.tensor(data, device=...)` and its kin copy host data to the device below the
    dispatch modes: made on the CPU here, then copied (and counted) through the dispatch mode."""

    FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = _device_of(kwargs.get("device"))
        if func in self.FROM_DATA and device is not None and device.type == NAME:
            return func(*args, **{**kwargs, "device": CPU}).to(device)
        return func(*args, **kwargs)


@contextlib.contextmanager
def standin() -> Iterator[Record]:
    """The stand-in device on for the block; yields its `Record`."""
    require()
    record = Record()
    with _FromData(), StandInMode(record):
        yield record
