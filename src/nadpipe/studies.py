"""The per-model studies beside the NAD pairs, all of one DAG shape (train_model ->
evaluate_model -> aggregate_study -> plot_study): the CIFAR-10 studies (nadpipe.cifar) and the
NAD validation studies (nadpipe.directions)."""

from __future__ import annotations

import torch

from . import cifar, directions

STUDIES = (*cifar.STUDIES, *directions.STUDIES)
SHAPES = {**cifar.SHAPES, **directions.SHAPES}  # (input channels, classes)
CONDITIONS = {**cifar.CONDITIONS, **directions.CONDITIONS}  # condition -> channels kept


def needs_cifar(study: str) -> bool:
    return study in cifar.STUDIES


def needs_nads(study: str) -> bool:
    return study != "fourier"


def variants(study: str, cfg_study: dict) -> list[str]:
    if needs_cifar(study):
        return cifar.variants(study, cfg_study)
    return directions.variants(study, cfg_study)


def variant_columns(study: str, variant: str) -> dict:
    if needs_cifar(study):
        return cifar.variant_columns(study, variant)
    return directions.variant_columns(study, variant)


def study_data(
    study: str,
    variant: str,
    seed: int,
    data: dict,
    cifar10: dict | None,
    vectors: torch.Tensor | None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The train and test tensors of one (study, variant, seed)."""
    if needs_cifar(study):
        return cifar.study_data(study, variant, seed, data, cifar.CifarSettings(**cifar10), vectors)
    return directions.study_data(study, variant, seed, data, vectors)
