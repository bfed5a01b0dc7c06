"""The fused SDPA backend equals the reference for full and causal masks, whatever the scale."""

from __future__ import annotations

import pytest
import torch
from _compare import randn

from attnmm import attend
from attnmm.masks import Causal, Full, Mask, Padding, Window


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [0.0, -0.7, 1e-300, 0.5])
@pytest.mark.parametrize("mask", [None, Full(), Causal()], ids=repr)
def test_any_scale(mask: Mask | None, scale: float, dtype: torch.dtype) -> None:
    # PyTorch's fused CPU kernel returns NaN for a causal mask and a scale <= 0 (found by fuzzing)
    q, k, v = (randn(2, 2, 5, 4, dtype=dtype, seed=s) for s in range(3))
    out = attend(q, k, v, mask, scale=scale, backend="sdpa")
    ref = attend(q.double(), k.double(), v.double(), mask, scale=scale, backend="reference")
    assert torch.isfinite(out).all()
    tol = 1e-10 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_empty_batch_and_zero_head_dim() -> None:
    # both found by fuzzing: an empty batch crashed the band and sparse kernels, E = 0 divided by zero
    x = randn(0, 2, 5, 4, seed=0)
    assert attend(x, x, x, Causal()).shape == (0, 2, 5, 4)
    for backend in ("sparse", "band", "sdpa"):  # nothing to compute, whichever backend is named
        assert attend(x, x, x, Window(1, 1), backend=backend).shape == (0, 2, 5, 4)
        y = randn(1, 0, 5, 4, seed=0)  # no heads
        assert attend(y, y, y, Window(1, 1), backend=backend).shape == (1, 0, 5, 4)
    q, k, v = randn(1, 2, 5, 0, seed=0), randn(1, 2, 5, 0, seed=1), randn(1, 2, 5, 3, seed=2)
    torch.testing.assert_close(attend(q, k, v, Causal()), attend(q, k, v, Causal(), backend="reference"))


@pytest.mark.parametrize("mask", [Full() & Padding([5, 0]), Window(1, 0) & Padding([5, 2])], ids=repr)
def test_masked_sdpa_gives_empty_rows_zero_output_and_gradients(mask: Mask) -> None:
    # queries with no allowed key: the fused kernel sees them attend everything, and their output is zeroed
    q, k, v = (randn(2, 2, 5, 4, seed=s).requires_grad_(True) for s in range(3))
    out = attend(q, k, v, mask, backend="sdpa_mask")
    ref = attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(out, ref)
    assert out[1, :, 4:].abs().max() == 0
    g = randn(*out.shape, seed=9)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b)
