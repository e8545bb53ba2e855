"""N networks of one structure evaluated as one grouped network, for their NADs: one call runs
every network on a batch of shared inputs (the dipole's probes), so the number of calls no
longer grows with the networks.

The template's traced graph (torch.fx) is run once per call with each value in one of three
layouts: `shared` (the same for every network: the input, and what is computed from it alone),
`chan` (batch, N * C, ...: network n's channels n*C .. (n+1)*C - 1) and `flat` (batch, N, F).
A convolution on shared inputs is one convolution with the networks' filters side by side; on
`chan` values, a grouped convolution (groups = N x its own); a linear layer is one matrix
product on shared inputs and a batched one on `flat` values; batch norm (eval), pooling and
pointwise maps act per channel and need nothing else; a channel concatenation is made per
network. The same outputs as the networks one after another, up to float rounding
(tests/test_grouped.py, every registry model the grouping covers). Anything else (attention,
layer norm, an operation on the batch dimension) raises NotGroupable: the caller runs the
networks one after another.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn


class NotGroupable(Exception):
    """The networks cannot be run as one grouped network (the message says which operation)."""


@dataclass
class V:
    """A value of the grouped graph: its tensor and layout ("shared", "chan" or "flat")."""

    t: torch.Tensor
    layout: str


POINTWISE_MODULES = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.GELU,
    nn.SiLU,
    nn.Sigmoid,
    nn.Tanh,
    nn.ELU,
    nn.Identity,
    nn.Dropout,  # eval mode: the identity
)
CHANNEL_MODULES = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
POINTWISE_FUNCTIONS = {
    F.relu,
    torch.relu,
    F.gelu,
    F.silu,
    torch.sigmoid,
    torch.tanh,
    F.leaky_relu,
    F.relu6,
}
CHANNEL_FUNCTIONS = {F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d}
BINARY = {operator.add, operator.mul, operator.sub, torch.add, torch.mul, operator.iadd}


class Grouped:
    """The networks `nets` (one structure, eval mode) as one callable: inputs (B, ...) shared
    by all -> (B, N, outputs). Raises NotGroupable when the structure has an operation it does
    not cover."""

    def __init__(self, nets: list[nn.Module]):
        self.n = len(nets)
        try:
            self.graph = fx.symbolic_trace(nets[0]).graph
        except Exception as e:  # noqa: BLE001 -- any tracing failure
            raise NotGroupable(f"cannot be traced ({type(e).__name__}: {e})") from None
        if any(net.training for net in nets):
            raise NotGroupable("a network in training mode")
        mods = [dict(net.named_modules()) for net in nets]
        self._template_modules = mods[0]
        self.params: dict[str, dict[str, Any]] = {}
        for node in self.graph.nodes:
            if node.op == "call_module":
                self.params[node.target] = self._stack([m[node.target] for m in mods])
            elif node.op == "get_attr":
                raise NotGroupable(f"reads the attribute {node.target} in its forward")

    def _stack(self, ms: list[nn.Module]) -> dict[str, Any]:
        m = ms[0]
        if isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros":
                raise NotGroupable(f"a convolution with padding mode {m.padding_mode}")
            bias = None if m.bias is None else torch.cat([x.bias for x in ms])
            return {"w": torch.cat([x.weight for x in ms]), "b": bias}
        if isinstance(m, nn.Linear):
            bias = None if m.bias is None else torch.stack([x.bias for x in ms])
            return {"w": torch.stack([x.weight for x in ms]), "b": bias}
        if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            if not m.track_running_stats or m.running_mean is None:
                raise NotGroupable("batch norm without running statistics")
            keys = ["running_mean", "running_var"] + ["weight", "bias"] * m.affine
            return {k: torch.cat([getattr(x, k) for x in ms]) for k in keys}
        if isinstance(m, (*POINTWISE_MODULES, *CHANNEL_MODULES, nn.Flatten)):
            return {}
        raise NotGroupable(f"a {type(m).__name__} layer")

    @staticmethod
    @torch.inference_mode()
    def largest(net: nn.Module, x: torch.Tensor) -> int:
        """The most elements a module's output holds in `net`'s forward of the one input `x`
        (batch 1): what one probe costs a network, read from the shapes of one forward."""
        sizes = [x.numel()]

        def hook(module, args, out):
            if isinstance(out, torch.Tensor):
                sizes.append(out.numel())

        handles = [m.register_forward_hook(hook) for m in net.modules()]
        try:
            net(x)
        finally:
            for h in handles:
                h.remove()
        return max(sizes)

    # -- layouts -----------------------------------------------------------------------------

    def chan(self, v: V) -> torch.Tensor:
        """`v` as (B, N*C, ...): a shared value repeated for every network."""
        if v.layout == "chan":
            return v.t
        if v.layout == "shared" and v.t.dim() >= 2:
            return v.t.repeat(1, self.n, *([1] * (v.t.dim() - 2)))
        raise NotGroupable(f"a {v.layout} value where channels are asked for")

    def flat(self, v: V) -> torch.Tensor:
        """`v` as (B, N, F)."""
        if v.layout == "flat":
            return v.t
        if v.layout == "shared":
            return v.t.reshape(len(v.t), 1, -1).expand(-1, self.n, -1)
        return v.t.reshape(len(v.t), self.n, -1)

    def flattened(self, v: V) -> V:
        """`v` flattened after its batch dimension, per network where it is one's."""
        return V(v.t.flatten(1), "shared") if v.layout == "shared" else V(self.flat(v), "flat")

    # -- one call ----------------------------------------------------------------------------

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        env: dict[fx.Node, Any] = {}

        def load(a):
            return fx.node.map_arg(a, lambda node: env[node])

        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node] = V(x, "shared")
            elif node.op == "call_module":
                env[node] = self._module(node, *load(node.args))
            elif node.op in ("call_function", "call_method"):
                env[node] = self._function(node, load(node.args), load(node.kwargs))
            elif node.op == "output":
                out = load(node.args[0])
                if not isinstance(out, V):
                    raise NotGroupable("an output that is not one tensor")
                return self.flat(out)
        raise NotGroupable("a graph without output")

    def _module(self, node: fx.Node, v: V) -> V:
        m, p = self.modules_of(node), self.params[node.target]
        if isinstance(m, nn.Conv2d):
            conv = dict(stride=m.stride, padding=m.padding, dilation=m.dilation)
            if v.layout == "shared":
                if m.groups != 1:
                    raise NotGroupable("a grouped convolution on the input")
                return V(F.conv2d(v.t, p["w"], p["b"], groups=1, **conv), "chan")
            return V(
                F.conv2d(self.chan(v), p["w"], p["b"], groups=m.groups * self.n, **conv), "chan"
            )
        if isinstance(m, nn.Linear):
            if v.layout == "shared":
                out = v.t @ p["w"].reshape(-1, p["w"].shape[-1]).T
                out = out.reshape(*v.t.shape[:-1], self.n, -1)
                if v.t.dim() != 2:
                    raise NotGroupable("a linear layer on a shared value of more than 2 dimensions")
                return V(out if p["b"] is None else out + p["b"], "flat")
            t = self.flat(v)
            out = torch.einsum("bni,noi->bno", t, p["w"])
            return V(out if p["b"] is None else out + p["b"], "flat")
        if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            t = self.chan(v) if v.layout != "flat" else v.t.reshape(len(v.t), -1)
            out = F.batch_norm(
                t,
                p["running_mean"],
                p["running_var"],
                p.get("weight"),
                p.get("bias"),
                False,
                0.0,
                m.eps,
            )
            return V(
                out if v.layout != "flat" else out.reshape(v.t.shape),
                "chan" if v.layout != "flat" else "flat",
            )
        if isinstance(m, nn.Flatten):
            if (m.start_dim, m.end_dim) != (1, -1):
                raise NotGroupable("a flatten of other dimensions than 1..-1")
            return self.flattened(v)
        if isinstance(m, POINTWISE_MODULES):
            return V(m(v.t), v.layout)
        if isinstance(m, CHANNEL_MODULES):
            if v.layout == "flat":
                raise NotGroupable(f"a {type(m).__name__} on flat values")
            return V(m(v.t), v.layout)
        raise NotGroupable(f"a {type(m).__name__} layer")

    def modules_of(self, node: fx.Node) -> nn.Module:
        return self._template_modules[node.target]

    def _function(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        f, name = node.target, node.target if node.op == "call_method" else None
        tensors = [a for a in args if isinstance(a, V)]
        if name == "size":
            (v, *dim) = args
            if dim == [0] or kwargs.get("dim") == 0:
                return v.t.size(0)
            raise NotGroupable("the size of a dimension other than the batch")
        if name in ("view", "reshape") or f is torch.reshape:
            v, *shape = args
            shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
            if len(shape) == 2 and shape[1] == -1 and shape[0] in (-1, len(v.t)):
                return self.flattened(v)
            raise NotGroupable(f"a {name or 'reshape'} to {shape}")
        if name == "flatten" or f is torch.flatten:
            v = args[0]
            start = args[1] if len(args) > 1 else kwargs.get("start_dim", 0)
            end = args[2] if len(args) > 2 else kwargs.get("end_dim", -1)
            if (start, end) != (1, -1):
                raise NotGroupable(f"a flatten of dimensions {start}..{end}")
            return self.flattened(v)
        if name == "mean" or f is torch.mean:
            v, *rest = args
            dims = rest[0] if rest else kwargs.get("dim")
            keep = rest[1] if len(rest) > 1 else kwargs.get("keepdim", False)
            dims = tuple(dims) if isinstance(dims, list | tuple) else (dims,)
            if v.layout == "flat" or not all(d >= 2 or d < 0 for d in dims):
                raise NotGroupable("a mean over the batch, the networks or the channels")
            out = v.t.mean(dims, keepdim=keep)
            if v.layout == "shared":
                return V(out, "shared")
            return V(out, "chan") if out.dim() > 2 else V(out.reshape(len(out), self.n, -1), "flat")
        if f is torch.cat or name == "cat":
            parts, dim = args[0], args[1] if len(args) > 1 else kwargs.get("dim", 0)
            if dim != 1 or any(not isinstance(p, V) for p in parts):
                raise NotGroupable(f"a concatenation along dimension {dim}")
            if all(p.layout == "shared" for p in parts):
                return V(torch.cat([p.t for p in parts], 1), "shared")
            ts = [self.chan(p) for p in parts]
            b, rest = len(ts[0]), ts[0].shape[2:]
            out = torch.cat([t.reshape(b, self.n, -1, *rest) for t in ts], 2)
            return V(out.reshape(b, -1, *rest), "chan")
        if f in POINTWISE_FUNCTIONS or name in ("relu", "sigmoid", "tanh"):
            v = args[0]
            call = getattr(v.t, name) if name else (lambda *a, **k: f(v.t, *a, **k))
            return V(call(*args[1:], **kwargs), v.layout)
        if f in CHANNEL_FUNCTIONS:
            v = args[0]
            if v.layout == "flat":
                raise NotGroupable(f"{f.__name__} on flat values")
            return V(f(v.t, *args[1:], **kwargs), v.layout)
        if f in BINARY or name in ("add", "mul", "add_"):
            if not tensors:
                raise NotGroupable("arithmetic without a tensor")
            layouts = {a.layout for a in tensors}
            if layouts == {"shared"}:
                layout, get = "shared", (lambda a: a.t)
            elif "flat" in layouts:
                layout, get = "flat", self.flat
            else:
                layout, get = "chan", self.chan
            vals = [get(a) if isinstance(a, V) else a for a in args]
            in_place = {operator.iadd: operator.add}  # the value, not the tensor changed in place
            op = getattr(torch, name.rstrip("_")) if name else in_place.get(f, f)
            return V(op(*vals, **kwargs), layout)
        raise NotGroupable(f"the operation {name or getattr(f, '__name__', f)}")
