"""The recipe-level rows: the torch encoder with attnmm's weights computes the same function, and one
training step of each side runs."""

from __future__ import annotations

import pytest
import torch

from benchmarks import recipe_models
from benchmarks._cases import get_case


@pytest.mark.parametrize("kind", ["speech", "strings", "text"])
def test_the_peer_is_the_same_model_and_both_train(kind: str) -> None:
    x = recipe_models.build(kind)()
    assert "max |attnmm - nn.TransformerEncoder|" in recipe_models.check(x)
    for runner in (recipe_models.ours(x), recipe_models.peer(x)):
        assert torch.isfinite(runner()).all()
    assert get_case(f"recipe_{kind}").build is not None


def test_throughput_verdict() -> None:
    assert recipe_models.throughput(32, 1.0)(2.0, 1.0, 0.0, 0.0) == ("32 vs 16 items/s: 2.00x", True)
    assert recipe_models.throughput(32, 1.0)(1.0, 2.0, 0.0, 0.0)[1] is False
