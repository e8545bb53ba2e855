"""Shared test fixtures; everything is CPU-sized and seeded."""

from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
torch.set_num_threads(2)

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def unit_vector():
    v = torch.randn(1024, generator=torch.Generator().manual_seed(3))
    return v / v.norm()
