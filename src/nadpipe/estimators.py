"""The NAD estimators by name: what each estimates and which NAD settings only it reads.
Torch-free: the config, the schema's valid values, the command's choices and help, the report,
the warnings and nadpipe.nads take them from here. A new estimator is an entry here and its
computation in nadpipe.nads.COMPUTATIONS, a function (nets, x0, step, batch_size, plan, done,
together) -> (n, n_points, d) sensitivities (by_dipole and by_gradient are the two)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Estimator:
    about: str  # what it estimates (the command's help, the schema, the docs)
    reads: tuple[str, ...] = ()  # NAD settings only it reads (given with another: a warning)
    published: bool = False  # estimates the published NADs; a run with another is told once


ESTIMATORS = {
    "dipole": Estimator(
        "the NAD paper's central difference (f(x0 + h e_k) - f(x0 - h e_k)) / 2h with a large "
        "step h: the published NADs",
        reads=("step", "windowed", "grouped"),
        published=True,
    ),
    "gradient": Estimator(
        "the input gradient at x0 by autograd: cheaper, but another object, the dipole's "
        "step-0 limit, not the published NADs",
    ),
}


def described() -> str:
    """Every estimator in one sentence each, for help texts."""
    return "; ".join(f"{name}: {e.about}" for name, e in ESTIMATORS.items())
