"""How an interface names a setting in its messages (the workflow by its config key, the
`nadpipe nads` command by its flag), and the NAD settings' check, said in those words by both."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..estimators import ESTIMATORS
from ..settings import MAX_FULL_D, MAX_SENSITIVITY_BYTES, MIN_NETWORKS, NadSettings, Shape


@dataclass(frozen=True)
class Words:
    """How an interface names a NAD setting in its messages: the workflow by its config key,
    the `nadpipe nads` command by its flag."""

    key: Callable[[str], str]  # field -> a message's subject: "config key 'nads.top_k'"
    name: Callable[[str], str]  # field -> its name in a sentence: "nads.top_k", "--top-k"
    assign: Callable[[str, object], str]  # (field, value) -> "top_k: 256" or "--top-k 256"


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


FLAGS = Words(_flag, _flag, lambda f, v: f"{_flag(f)} {v}")


def config_words(arch: str) -> Words:
    """The words of the workflow for the NAD settings of architecture `arch`."""
    return Words(
        lambda f: f"config key 'architectures.{arch}.nads.{f}' (or nads.{f})",
        lambda f: f"nads.{f}",
        lambda f, v: f"{f}: {v}",
    )


def nad_problem(s: NadSettings, shape: Shape, words: Words, who: str = "the") -> str | None:
    """Why NADs with settings `s` of inputs `shape` cannot be computed (in the interface's
    `words`; `who` names whose inputs they are), or None: checked before any work."""
    key = words.key
    for name, low in (("n_networks", MIN_NETWORKS), ("n_points", 1), ("batch_size", 1)):
        value = getattr(s, name)
        if value < low:
            why = " (the split-half diagnostic needs two halves of 11 networks)" * (
                name == "n_networks"
            )
            return f"{key(name)}: {value} is less than the minimum of {low}{why}"
    if s.networks_per_chunk < 1:
        return f"{key('networks_per_chunk')}: {s.networks_per_chunk} is less than the minimum of 1"
    if "step" in ESTIMATORS[s.estimator].reads and not (math.isfinite(s.step) and s.step > 0):
        return f"{key('step')}: {s.step} is not a positive number (the {s.estimator}'s step h)"
    inputs = f"{who} inputs {shape} have {shape.d} coordinates"
    if s.top_k is not None and s.top_k < 1:
        return f"{key('top_k')}: {s.top_k} is less than the minimum of 1"
    if s.top_k is not None and s.top_k > shape.d:
        return f"{key('top_k')}: {s.top_k} is greater than the maximum of {shape.d} ({inputs})"
    if s.top_k is None and shape.d > MAX_FULL_D:
        return (
            f"{key('top_k')}: {inputs}; above {MAX_FULL_D} the d x d covariance is not formed, "
            f"so say how many NADs to compute (e.g. {words.assign('top_k', 256)})"
        )
    samples = s.n_networks * s.n_points
    if samples * shape.d * 8 > MAX_SENSITIVITY_BYTES:
        return (
            f"{key('n_networks')}: {s.n_networks} networks x {s.n_points} point(s) x {shape.d} "
            f"coordinates need {samples * shape.d * 8 / 2**30:.0f} GiB of sensitivities "
            f"(float64), over the {MAX_SENSITIVITY_BYTES // 2**30} GiB nadpipe allows: lower "
            f"{words.name('n_networks')}"
        )
    if s.top_k is not None and shape.d > MAX_FULL_D and s.top_k > samples - 1:
        return (
            f"{key('top_k')}: {s.top_k} NADs asked from {samples} sensitivity samples "
            f"(rank at most {samples - 1}); raise {words.name('n_networks')} or lower "
            f"{words.name('top_k')}"
        )
    return None


def shard_problem(
    s: NadSettings, per_shard: int | None, until_converged: bool, words: Words
) -> str | None:
    """Why NADs cannot be computed in shards of `per_shard` networks (nadpipe.shards), or
    `until_converged`, with settings `s`; None when they can (or are not sharded)."""
    key = words.key
    if per_shard is None:
        if until_converged:
            return (
                f"{key('until_converged')}: the networks are added a shard at a time; say how "
                "many a shard has (e.g. "
                f"{words.assign('networks_per_shard', s.networks_per_chunk)})"
            )
        return None
    if per_shard < 1:
        return f"{key('networks_per_shard')}: {per_shard} is less than the minimum of 1"
    if per_shard % s.networks_per_chunk:
        return (
            f"{key('networks_per_shard')}: {per_shard} is no multiple of "
            f"{words.name('networks_per_chunk')} ({s.networks_per_chunk}): a shard evaluates its "
            "networks in the chunks an unsharded computation does, so that the merged NADs equal "
            "the unsharded ones; make it a multiple (or change "
            f"{words.name('networks_per_chunk')})"
        )
    return None
