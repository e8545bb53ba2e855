"""Fast dipole probes: x0 +- h e_k differs from x0 in one pixel, so through a network's early
local operations (convolutions, pooling, pointwise maps, sums and channel concatenations of
such) only a window around that pixel changes.

The network is traced into a graph (torch.fx). Each probe's value at an operation is carried
as a small window, the rest of the map being the unperturbed network's (computed once per
network), until the operation is one this does not know or a convolution whose windows would
cover most of its map; there the full maps are rebuilt and the rest runs on every probe as
usual. Exact up to float rounding (checked against the plain forward in the tests). Not
windowed: modules of other types (subclasses included, as their forward may differ), padding
other than zeros, ceil-mode or padded pooling, batch norm without running statistics, and
models that torch.fx cannot trace (then every probe runs through the whole network).

Windows are kept channels-last, (probes, positions, channels), so that gathering a window
moves whole rows of channels.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

# modules and functions that act on each position alone (batch norm only in eval mode, with
# running statistics)
POINTWISE = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity)
POINTWISE_FUNCTIONS = {F.relu, torch.relu, F.leaky_relu, F.elu, F.gelu, F.silu, torch.tanh}
POINTWISE_FUNCTIONS |= {torch.sigmoid}
POINTWISE_METHODS = {"relu", "tanh", "sigmoid"}
ELEMENTWISE = {operator.add, operator.sub, operator.mul, operator.truediv, torch.add, torch.mul}
# a convolution, sum or concatenation whose windows would cover more of the map than this
# runs on full maps (measured: windowing them costs more than it saves)
MAX_COVER = 0.5


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _geometry(m: nn.Module) -> tuple[tuple[int, int], ...] | None:
    """(kernel, stride, padding, dilation) per axis of a window op, None if unsupported."""
    if type(m) is nn.Conv2d:
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            return None
        return _pair(m.kernel_size), _pair(m.stride), _pair(m.padding), _pair(m.dilation)
    if type(m) in (nn.MaxPool2d, nn.AvgPool2d):
        if m.ceil_mode or _pair(m.padding) != (0, 0):
            return None
        stride = m.stride if m.stride is not None else m.kernel_size
        dilation = m.dilation if type(m) is nn.MaxPool2d else 1
        return _pair(m.kernel_size), _pair(stride), (0, 0), _pair(dilation)
    return None


def _pointwise_module(m: nn.Module) -> bool:
    if type(m) in POINTWISE or (type(m) is nn.Dropout and not m.training):
        return True
    return type(m) is nn.BatchNorm2d and not m.training and m.track_running_stats


@dataclass
class _Axis:
    """Per-probe extent along one spatial axis of a map of `length`: the changed positions
    [lo, hi], inside a window of `size` starting at `off` ((n,) long tensors)."""

    lo: torch.Tensor
    hi: torch.Tensor
    off: torch.Tensor
    size: int
    length: int

    @staticmethod
    def around(lo: torch.Tensor, hi: torch.Tensor, length: int) -> _Axis:
        size = int((hi - lo + 1).max())
        return _Axis(lo, hi, lo.clamp(max=length - size), size, length)

    def through(self, k: int, s: int, p: int, d: int) -> _Axis:
        """The changed output extent, and its window, of a window op (kernel k, stride s,
        padding p, dilation d)."""
        out_len = (self.length + 2 * p - d * (k - 1) - 1) // s + 1
        lo = torch.div(self.lo + p - d * (k - 1) + s - 1, s, rounding_mode="floor")
        lo = lo.clamp(0, out_len - 1)
        hi = torch.div(self.hi + p, s, rounding_mode="floor").clamp(max=out_len - 1)
        return _Axis.around(lo, torch.maximum(hi, lo), out_len)  # hi < lo: stride skipped it

    def union(self, other: _Axis) -> _Axis:
        lo, hi = torch.minimum(self.lo, other.lo), torch.maximum(self.hi, other.hi)
        return _Axis.around(lo, hi, self.length)

    def cells(self) -> torch.Tensor:
        return self.off[:, None] + torch.arange(self.size, device=self.off.device)  # (n, size)


def _too_wide(rows: _Axis, cols: _Axis) -> bool:
    """Whether windows this large cost more than the full maps (MAX_COVER)."""
    return rows.size * cols.size > MAX_COVER * rows.length * cols.length


@dataclass
class _Regions:
    """Builds each probe's input region of a window op, or its value on a wider window: the
    unperturbed (padded) map's region with the probe's window written over it."""

    pads: tuple[int, int]
    strides: tuple[int, int]
    shape: tuple[int, int]  # (rows, cols) of every region
    region_id: torch.Tensor  # (n,) which region of the map, row-major
    place: torch.Tensor  # (n, h * w) window cell -> region position, or the end (a sink)

    @classmethod
    def build(cls, src: tuple[_Axis, _Axis], dst: tuple[_Axis, _Axis], geom) -> _Regions:
        """Regions of the input windows `src` that the output windows `dst` of a window op
        with geometry `geom` (kernel, stride, padding, dilation per axis) need."""
        starts, lengths, per_axis = [], [], []
        for a, b, k, s, p, d in zip(src, dst, *geom, strict=True):
            start, length = b.off * s, (b.size - 1) * s + d * (k - 1) + 1  # padded coordinates
            rel = a.off[:, None] + torch.arange(a.size, device=a.off.device) + p - start[:, None]
            starts.append(start)
            lengths.append(length)
            per_axis.append((rel, (rel >= 0) & (rel < length)))
        (rr, ri), (cr, ci) = per_axis
        _, strides, pads, _ = geom
        per_row = (src[1].length + 2 * pads[1] - lengths[1]) // strides[1] + 1
        place = rr[:, :, None] * lengths[1] + cr[:, None, :]
        place = place.where(ri[:, :, None] & ci[:, None, :], lengths[0] * lengths[1])
        region_id = starts[0] // strides[0] * per_row + starts[1] // strides[1]
        return cls(pads, strides, tuple(lengths), region_id, place.flatten(1))

    def to(self, device) -> _Regions:
        moved = self.region_id.to(device), self.place.to(device)
        return _Regions(self.pads, self.strides, self.shape, *moved)

    def __call__(self, base: torch.Tensor, window: torch.Tensor, sel: slice) -> torch.Tensor:
        """base (1, C, H, W) map, window (n, h * w, C) -> (n, C, rows, cols) regions."""
        (pr, pc), (sr, sc), (lr, lc) = self.pads, self.strides, self.shape
        padded = F.pad(base[0], (pc, pc, pr, pr)).permute(1, 2, 0)  # (Hp, Wp, C)
        # every region the probes use, whole: (n_regions, rows * cols + 1, C), the last
        # position a sink for window cells outside the region
        table = padded.unfold(0, lr, sr).unfold(1, lc, sc).permute(0, 1, 3, 4, 2)
        table = F.pad(table.reshape(-1, lr * lc, padded.shape[2]), (0, 0, 0, 1))
        out = table.index_select(0, self.region_id[sel])
        # out of place: vmap (networks together) has a batching rule for it, not for scatter_
        out = out.scatter(1, self.place[sel][:, :, None].expand(-1, -1, window.shape[2]), window)
        out = out[:, :-1].unflatten(1, self.shape).permute(0, 3, 1, 2)
        return out  # channels-last strides already (a copy would not work under vmap)

    def window(self, base: torch.Tensor, window: torch.Tensor, sel: slice) -> torch.Tensor:
        """The same value on the wider window: (n, rows * cols, C)."""
        return _last(self(base, window, sel))


def _last(x: torch.Tensor) -> torch.Tensor:
    """(n, C, h, w) -> (n, h * w, C)."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, x.shape[1])


IDENTITY = ((1, 1), (1, 1), (0, 0), (1, 1))  # window-op geometry that only re-windows


@dataclass
class _Step:
    """How one graph node is evaluated: "window" (per probe a window; `regions` rebuild the
    inputs' values on the windows the node needs) or "full" (the plain operation; windowed
    inputs are first written into full maps)."""

    node: fx.Node
    mode: str
    regions: list[_Regions | None]  # per tensor input of a windowed node
    axes: tuple[_Axis, _Axis] | None = None  # of a windowed node's output


class WindowedDipole:
    """The plan for one network structure and set of probe coordinates; `__call__` evaluates
    one network of that structure."""

    def __init__(self, coords, steps: list[_Step], cells: dict):
        self.coords, self.steps = coords, steps  # coords (n, 3): channel, row, col
        self.cells = cells  # node -> (n, h * w) flat map positions of its windows
        # values no longer needed after each step (freed, as a plain forward frees them)
        last = {a: i for i, s in enumerate(steps) for a in s.node.all_input_nodes}
        self.done: list[list[fx.Node]] = [[] for _ in steps]
        for a, i in last.items():
            self.done[i].append(a)

    @property
    def windowed(self) -> list[str]:
        """The operations evaluated on windows (module names, else node names)."""
        return [
            _label(s.node) for s in self.steps if s.mode == "window" and s.node.op != "placeholder"
        ]

    @classmethod
    def plan(
        cls, template: nn.Module, coords: torch.Tensor, size: tuple[int, int], device
    ) -> WindowedDipole | None:
        """Plan for probes at `coords` (n, 3) (channel, row, col) of an input of spatial `size`
        (rows, cols), or None when nothing can be windowed (then the plain forward is as fast)
        or the model cannot be traced."""
        try:
            graph = fx.symbolic_trace(template).graph
        except Exception:  # noqa: BLE001 -- any tracing failure: run the plain forward
            return None
        if sum(n.op == "placeholder" for n in graph.nodes) != 1:
            return None
        modules = dict(template.named_modules())
        axes: dict[fx.Node, tuple[_Axis, _Axis]] = {}  # windowed nodes
        steps = []
        for node in graph.nodes:
            if node.op == "placeholder" and not steps:
                r, c = coords[:, 1], coords[:, 2]
                rows, cols = _Axis(r, r, r, 1, size[0]), _Axis(c, c, c, 1, size[1])
                axes[node] = (rows, cols)
                steps.append(_Step(node, "window", [], axes[node]))
                continue
            step = _window_step(node, modules, axes)
            if step is None:
                step = _Step(node, "full", [])
            else:
                axes[node] = step.axes
            steps.append(step)
        if not any(r is not None for s in steps for r in s.regions):
            return None
        mode = {s.node: s.mode for s in steps}
        cells = {}
        for node, (rows, cols) in axes.items():
            if any(mode[u] == "full" for u in node.users):
                cells[node] = (
                    (rows.cells()[:, :, None] * cols.length + cols.cells()[:, None, :])
                    .flatten(1)
                    .to(device)
                )
        for s in steps:
            s.regions = [r and r.to(device) for r in s.regions]
        return cls(coords.to(device), steps, cells)

    def __call__(
        self, net: nn.Module, x0: torch.Tensor, deltas: torch.Tensor, sel: slice
    ) -> torch.Tensor:
        """(n,) logit 0 of `net` (of the planned structure, eval mode) at x0 (C, H, W) with
        `deltas` (n,) added at the plan's coordinates, for the probes `sel`."""
        at = self.coords[sel]
        window = x0[:, at[:, 1], at[:, 2]].T.clone()  # (n, C): each probe's 1x1 input window
        window[torch.arange(len(at), device=window.device), at[:, 0]] += deltas[sel]
        win: dict[fx.Node, tuple[torch.Tensor, torch.Tensor]] = {}  # node -> (base, window)
        full: dict[fx.Node, object] = {}

        def value(a: fx.Node):  # a node's value on every probe
            if a not in full:
                base, w = win[a]
                n = len(w)
                # (n, C, H * W), the layout a plain forward has
                maps = base.flatten(2).expand(n, -1, -1)
                cells = self.cells[a][sel][:, None, :].expand(-1, w.shape[2], -1)
                maps = maps.scatter(2, cells, w.transpose(1, 2))
                full[a] = maps.unflatten(2, base.shape[2:])
            return full[a]

        for step, done in zip(self.steps, self.done, strict=True):
            node = step.node
            if node.op == "placeholder":
                win[node] = (x0[None], window[:, None, :])
            elif node.op == "output":
                return fx.node.map_arg(node.args[0], value)[:, 0]
            elif step.mode == "window":
                win[node] = _window_value(node, step, win, net, sel)
            else:
                args = fx.node.map_arg(node.args, value)
                kwargs = fx.node.map_arg(node.kwargs, value)
                full[node] = _run(node, args, kwargs, net)
            for a in done:
                win.pop(a, None)
                full.pop(a, None)
        raise AssertionError("the graph has no output")


def _label(node: fx.Node) -> str:
    return str(node.target) if node.op == "call_module" else node.name


def _window_step(node: fx.Node, modules: dict, axes: dict) -> _Step | None:
    """The windowed evaluation of `node` if all its inputs are windowed and it is local."""
    tensors = node.all_input_nodes
    if not tensors or any(a not in axes for a in tensors):
        return None
    one = len(tensors) == 1
    if node.op == "call_module":
        m = modules[node.target]
        if not one or node.kwargs:
            return None
        if _pointwise_module(m):
            return _Step(node, "window", [None], axes[tensors[0]])
        geom = _geometry(m)
        if geom is None or getattr(m, "return_indices", False):
            return None
        src = axes[tensors[0]]
        dst = tuple(a.through(k, s, p, d) for a, k, s, p, d in zip(src, *geom, strict=True))
        if type(m) is nn.Conv2d and _too_wide(*dst):
            return None  # (pooling only shrinks the maps: always windowed)
        return _Step(node, "window", [_Regions.build(src, dst, geom)], dst)
    function = node.op == "call_function"
    pointwise = (function and node.target in POINTWISE_FUNCTIONS) or (
        node.op == "call_method" and node.target in POINTWISE_METHODS
    )
    if pointwise and one and node.args[0] is tensors[0]:
        return _Step(node, "window", [None], axes[tensors[0]])
    if function and node.target in ELEMENTWISE and len(node.args) == 2 and not node.kwargs:
        if not all(isinstance(a, fx.Node | int | float) for a in node.args):
            return None
        if one:  # with a number
            return _Step(node, "window", [None], axes[tensors[0]])
        return _union_step(node, tensors, axes)
    if function and node.target is torch.cat and isinstance(node.args[0], list | tuple):
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if dim in (1, -3) and not set(node.kwargs) - {"dim"}:
            return _union_step(node, tensors, axes)
    return None


def _union_step(node: fx.Node, tensors: list[fx.Node], axes: dict) -> _Step | None:
    """Inputs re-windowed to their common window, then combined position by position."""
    rows, cols = axes[tensors[0]]
    for a in tensors[1:]:
        rows, cols = rows.union(axes[a][0]), cols.union(axes[a][1])
    if _too_wide(rows, cols):
        return None
    regions = [_Regions.build(axes[a], (rows, cols), IDENTITY) for a in tensors]
    return _Step(node, "window", regions, (rows, cols))


def _window_value(node, step, win, net, sel):
    """(base, window) of a windowed node."""
    tensors = node.all_input_nodes
    if node.op == "call_module":
        m = net.get_submodule(node.target)
        base, w = win[tensors[0]]
        regions = step.regions[0]
        if regions is not None:  # a window op on each probe's region
            return m(base), _last(_unpadded(m, regions(base, w, sel)))
        if isinstance(m, nn.BatchNorm2d):  # channels in dim 1
            return m(base), m(w.transpose(1, 2)[..., None])[..., 0].transpose(1, 2)
        return m(base), m(w)  # elementwise: any layout will do
    if step.regions[0] is None:  # pointwise function or method, or with a number
        base, w = win[tensors[0]]
        f = getattr(torch.Tensor, node.target) if node.op == "call_method" else node.target
        return tuple(
            f(*fx.node.map_arg(node.args, lambda _, t=t: t), **node.kwargs) for t in (base, w)
        )
    # re-window every input to the common window, then combine
    rewindowed = {
        a: (win[a][0], r.window(*win[a], sel)) for a, r in zip(tensors, step.regions, strict=True)
    }
    bases = fx.node.map_arg(node.args, lambda a: rewindowed[a][0])
    windows = fx.node.map_arg(node.args, lambda a: rewindowed[a][1])
    if node.target is torch.cat:
        return torch.cat(bases[0], dim=1), torch.cat(windows[0], dim=2)
    return node.target(*bases), node.target(*windows)


def _run(node: fx.Node, args, kwargs, net: nn.Module):
    """A node's plain evaluation."""
    if node.op == "call_module":
        return net.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    if node.op == "get_attr":
        return operator.attrgetter(node.target)(net)
    raise ValueError(f"unexpected graph node {node.op}")


def _unpadded(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A window op on regions that carry their own padding: a convolution runs without its
    padding; pooling has none (`_geometry`)."""
    if type(m) is nn.Conv2d:
        return F.conv2d(x, m.weight, m.bias, m.stride, 0, m.dilation, m.groups)
    return m(x)
