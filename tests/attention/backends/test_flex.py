"""The FlexAttention backend equals the reference on CUDA (skipped elsewhere); its CPU inference path is
in test_flex_cpu.py."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.attention.backends.flex import flex_available
from attnmm.masks import Causal, Chunk, Grid, Mask, Padding, Window

pytestmark = pytest.mark.skipif(flex_available("cuda") is not None, reason=str(flex_available("cuda")))


@pytest.mark.parametrize(
    "mask, L",
    [
        (Window(16, 16), 300),
        (Chunk(32, 1) & Padding([300, 0]), 300),
        (Causal() & Padding([300, 77]), 300),
        (Grid(16, 16, 5, dilation=2), 256),
    ],
    ids=repr,
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(mask: Mask, L: int, dtype: torch.dtype) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 2, L, 32, device="cuda", generator=g).to(dtype).requires_grad_(True) for _ in range(3))
    out = attend(q, k, v, mask, backend="flex")
    ref = attend(q, k, v, mask, backend="reference")
    tol = dict(atol=2e-3, rtol=2e-3) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(out, ref, **tol)
    go = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), go), torch.autograd.grad(ref, (q, k, v), go)):
        torch.testing.assert_close(a, b, **tol)
