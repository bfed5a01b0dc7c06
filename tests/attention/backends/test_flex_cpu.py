"""The FlexAttention backend on the CPU, for inference: values against the reference, block masks
shared by equal masks, one compiled kernel for many lengths, and training refused by name."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.attention._problem import Problem
from attnmm.attention.backends import flex
from attnmm.attention.backends.flex import flex_available
from attnmm.masks import Causal, Documents, Grid, Padding, Window

pytestmark = pytest.mark.skipif(flex_available("cpu") is not None, reason=str(flex_available("cpu")))


def test_cpu_inference_matches_the_reference() -> None:
    g = torch.Generator().manual_seed(0)
    cases = [
        (Documents([100, 0, 250, 90]) & Causal(), 440),
        (Grid(16, 16, 5), 256),
        (Window(8, 8) & ~Window(0, 0), 150),
    ]
    with torch.no_grad():
        for mask, L in cases:
            q, k, v = (torch.randn(2, 2, L, 16, generator=g) for _ in range(3))
            out = attend(q, k, v, mask, backend="flex")
            torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=2e-5, rtol=2e-4)


def test_twenty_lengths_compile_at_most_twice() -> None:
    from torch._dynamo.utils import counters

    g = torch.Generator().manual_seed(1)
    graphs = counters["stats"]["unique_graphs"]
    mask = Window(16, 4)
    with torch.no_grad():
        for L in torch.randint(20, 1000, (20,), generator=g).tolist():  # a batch of new length each time
            q, k, v = (torch.randn(2, 2, L, 16, generator=g) for _ in range(3))
            out = attend(q, k, v, mask, backend="flex")
        torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=2e-5, rtol=2e-4)
    assert counters["stats"]["unique_graphs"] - graphs <= 2  # dynamic shapes (below one block: the second)


def test_block_masks_are_shared_by_equal_masks() -> None:
    flex._block_masks.clear()
    q = torch.randn(2, 1, 200, 16)
    with torch.no_grad():
        for _ in range(3):  # a new but equal mask per batch, as adapters build them
            attend(q, q, q, Documents([120, 80]) & Causal(), backend="flex")
        attend(q, q, q, Documents([100, 100]) & Causal(), backend="flex")
    assert len(flex._block_masks) == 2


def test_training_and_other_dtypes_are_refused_on_the_cpu() -> None:
    backend = flex.FlexBackend()
    q = torch.randn(1, 1, 32, 16, requires_grad=True)
    window = Window(4, 0)
    training = Problem(q, q, q, window, 0.25, 0.0, "softmax", None, False, False)
    assert "no FlexAttention backward for the CPU (inference only there)" in backend.unsupported(training)
    x = q.detach()
    half = x.bfloat16()
    assert "float32 only there" in backend.unsupported(Problem(half, half, half, window, 0.25, 0.0, "softmax",
                                                               None, False, False))
    padded = Problem(x, x, x, window & Padding([20]), 0.25, 0.0, "softmax", None, False, False)
    assert "per-item mask" in backend.unsupported(padded)
    with pytest.raises(ValueError, match="cannot compute this attention: torch compiles no FlexAttention backward"):
        attend(q, q, q, window, backend="flex")
