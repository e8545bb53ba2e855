"""Fast dipole probes: x0 +- h e_k differs from x0 in one pixel, so through a network's leading
local layers (convolutions, pooling, pointwise maps) only a window around that pixel changes.

For a plain `nn.Sequential` the probes are carried through those layers as small windows, the
rest of each map being the unperturbed network's (computed once per network); the full maps
are rebuilt where a convolution's windows would cover most of its map, and the remaining layers
run on every probe as usual. Exact up to float rounding (checked against the plain forward in
the tests). Anything this does not know ends the windowed part: a module of another type
(subclasses included, as their forward may differ), padding other than zeros, ceil-mode or
padded pooling, batch norm without running statistics.

Windows and maps are kept channels-last, (probes, positions, channels), so that gathering a
window moves whole rows of channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

# maps that act on each position alone (batch norm only with running statistics, in eval mode)
POINTWISE = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity)
MAX_COVER = 0.5  # a convolution whose windows cover more of its map runs on full maps


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


def _pointwise(m: nn.Module) -> bool:
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


def _next_axis(a: _Axis, k: int, s: int, p: int, d: int) -> tuple[_Axis, torch.Tensor, int]:
    """Through a window op (kernel k, stride s, padding p, dilation d): the changed output
    extent and its window, and the padded input positions each window needs (start (n,),
    length)."""
    out_len = (a.length + 2 * p - d * (k - 1) - 1) // s + 1
    lo = torch.div(a.lo + p - d * (k - 1) + s - 1, s, rounding_mode="floor").clamp(0, out_len - 1)
    hi = torch.div(a.hi + p, s, rounding_mode="floor").clamp(max=out_len - 1)
    hi = torch.maximum(hi, lo)  # no output reached (the stride skips it): any window will do
    size = int((hi - lo + 1).max())
    off = lo.clamp(max=out_len - size)
    return _Axis(lo, hi, off, size, out_len), off * s, (size - 1) * s + d * (k - 1) + 1


@dataclass
class _Stage:
    """One leading module. For a window op, how to build each probe's input region: the
    unperturbed (padded) map's region, with the probe's window written over it."""

    index: int  # position of the module in the Sequential
    pads: tuple[int, int] = (0, 0)
    strides: tuple[int, int] = (1, 1)
    region: tuple[int, int] = (0, 0)  # (rows, cols) of every region
    region_id: torch.Tensor | None = None  # (n,) which region of the map, row-major
    place: torch.Tensor | None = None  # (n, h * w) window cell -> region position (or the end)

    @classmethod
    def window_op(cls, index, rows: _Axis, cols: _Axis, starts, lengths, pads, strides):
        per_axis = []
        for a, start, length, pad in zip((rows, cols), starts, lengths, pads, strict=True):
            rel = a.off[:, None] + torch.arange(a.size) + pad - start[:, None]
            per_axis.append((rel, (rel >= 0) & (rel < length)))
        (rr, ri), (cr, ci) = per_axis
        n_cols = (cols.length + 2 * pads[1] - lengths[1]) // strides[1] + 1  # regions per row
        place = rr[:, :, None] * lengths[1] + cr[:, None, :]
        place = place.where(ri[:, :, None] & ci[:, None, :], lengths[0] * lengths[1])
        region_id = starts[0] // strides[0] * n_cols + starts[1] // strides[1]
        return cls(index, pads, strides, (lengths[0], lengths[1]), region_id, place.flatten(1))

    def to(self, device) -> _Stage:
        if self.region_id is None:
            return self
        moved = self.region_id.to(device), self.place.to(device)
        return _Stage(self.index, self.pads, self.strides, self.region, *moved)

    def regions(self, base: torch.Tensor, window: torch.Tensor, sel: slice) -> torch.Tensor:
        """base (C, H, W) map, window (n, h * w, C) -> (n, C, rows, cols) regions."""
        (pr, pc), (sr, sc), (lr, lc) = self.pads, self.strides, self.region
        padded = F.pad(base, (pc, pc, pr, pr)).permute(1, 2, 0)  # (Hp, Wp, C)
        # every region the probes use, whole: (n_regions, rows * cols + 1, C), the last
        # position a sink for window cells outside the region
        table = padded.unfold(0, lr, sr).unfold(1, lc, sc).permute(0, 1, 3, 4, 2)
        table = F.pad(table.reshape(-1, lr * lc, base.shape[0]), (0, 0, 0, 1))
        out = table.index_select(0, self.region_id[sel])
        place = self.place[sel][:, :, None].expand(-1, -1, window.shape[2])
        out.scatter_(1, place, window)
        return (
            out[:, :-1]
            .unflatten(1, self.region)
            .permute(0, 3, 1, 2)
            .contiguous(memory_format=torch.channels_last)
        )


def _last(x: torch.Tensor) -> torch.Tensor:
    """(n, C, h, w) -> (n, h * w, C)."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, x.shape[1])


class WindowedDipole:
    """The plan for one template and set of probe pixels; `__call__` evaluates one network."""

    def __init__(self, template: nn.Sequential, stages: list[_Stage], cells: torch.Tensor):
        self.template, self.stages = template, stages
        self.cells = cells  # (n, h * w) flat map positions of each probe's final window
        self.stop = stages[-1].index + 1  # modules from here on run on full maps

    @classmethod
    def plan(
        cls, template: nn.Module, pixels: torch.Tensor, size: tuple[int, int], device
    ) -> WindowedDipole | None:
        """Plan for probes at `pixels` (n, 2) (row, col) of a (rows, cols) input, or None when
        no leading module is a window op (then there is nothing to save)."""
        if type(template) is not nn.Sequential:
            return None
        rows = _Axis(pixels[:, 0], pixels[:, 0], pixels[:, 0], 1, size[0])
        cols = _Axis(pixels[:, 1], pixels[:, 1], pixels[:, 1], 1, size[1])
        stages = []
        for i, m in enumerate(template):
            if _pointwise(m):
                stages.append(_Stage(i))
                continue
            geom = _geometry(m)
            if geom is None:
                break
            (kr, kc), (sr, sc), (pr, pc), (dr, dc) = geom
            new_rows, start_r, len_r = _next_axis(rows, kr, sr, pr, dr)
            new_cols, start_c, len_c = _next_axis(cols, kc, sc, pc, dc)
            cover = new_rows.size * new_cols.size / (new_rows.length * new_cols.length)
            if type(m) is nn.Conv2d and cover > MAX_COVER:  # pooling only shrinks the maps
                break
            starts, lengths = (start_r, start_c), (len_r, len_c)
            stages.append(_Stage.window_op(i, rows, cols, starts, lengths, (pr, pc), (sr, sc)))
            rows, cols = new_rows, new_cols
        if all(s.region_id is None for s in stages):
            return None
        r = rows.off[:, None] + torch.arange(rows.size)
        c = cols.off[:, None] + torch.arange(cols.size)
        cells = (r[:, :, None] * cols.length + c[:, None, :]).flatten(1)
        return cls(template, [s.to(device) for s in stages], cells.to(device))

    def __call__(
        self,
        params: dict[str, torch.Tensor],
        x0: torch.Tensor,
        pixels: torch.Tensor,
        deltas: torch.Tensor,
        sel: slice,
    ) -> torch.Tensor:
        """(n,) logit 0 of the network with `params` at x0 (C, H, W) with `deltas` (n,) added
        at `pixels` (n, 2) (channel 0), for the probes `sel` of the plan."""
        pix = pixels[sel]
        base = x0[None]  # (1, C, H, W): the unperturbed maps
        window = x0[:, pix[:, 0], pix[:, 1]].T.clone()  # each probe's 1x1 window of the input
        window[:, 0] += deltas[sel]
        window = window[:, None, :]  # (n, 1, C)
        for stage in self.stages:
            m = self.template[stage.index]
            sub = _sub_params(params, stage.index)
            if stage.region_id is None and not sub:  # elementwise: any layout will do
                window = m(window)
            elif stage.region_id is None:  # batch norm: channels in dim 1
                window = _apply(m, sub, window.permute(0, 2, 1)[..., None])[..., 0].transpose(1, 2)
            else:
                regions = stage.regions(base[0], window, sel)
                window = _last(_apply(m, sub, regions, padded=False))
            base = _apply(m, sub, base)
        n = len(pix)
        full = _last(base).expand(n, -1, -1).clone()  # (n, H * W, C)
        full[torch.arange(n, device=full.device)[:, None], self.cells[sel]] = window
        h = full.unflatten(1, base.shape[2:]).permute(0, 3, 1, 2)  # (n, C, H, W)
        for i in range(self.stop, len(self.template)):
            h = _apply(self.template[i], _sub_params(params, i), h)
        return h[:, 0]


def _sub_params(params: dict[str, torch.Tensor], index: int) -> dict[str, torch.Tensor]:
    prefix = f"{index}."
    return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}


def _apply(
    m: nn.Module, sub: dict[str, torch.Tensor], x: torch.Tensor, padded: bool = True
) -> torch.Tensor:
    """Module `m` with parameters `sub`; `padded=False` runs a convolution without its padding
    (the regions carry the zeros)."""
    if type(m) is nn.Conv2d and not padded:
        return F.conv2d(x, sub["weight"], sub.get("bias"), m.stride, 0, m.dilation, m.groups)
    return functional_call(m, sub, (x,)) if sub else m(x)
