"""bf16 tolerances of the attention core: each backend on bf16 inputs, and the autocast path that
``--trainer.precision=bf16-mixed`` takes (fp32 weights, bf16 matrix products), against fp64/fp32.

The bound: bf16 keeps 8 significant bits (unit roundoff 2**-8 ~ 3.9e-3), so for inputs and
outputs of order one every backend's output and input gradients stay within ``atol = rtol =
3e-2`` of the fp64 reference; under autocast an encoder's output stays within 3% (relative norm)
of its fp32 output and its fp32 weight gradients point the same way (cosine > 0.99).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnmm import attend
from attnmm.masks import Causal, Chunk, Graph, Grid, Mask, Padding, Window
from attnmm.nn import Encoder

BF16 = dict(atol=3e-2, rtol=3e-2)

# (mask, backend): every backend ``auto`` picks on CPU, each on a mask it serves
CASES = [
    (None, "sdpa"),
    (Causal(), "sdpa"),
    (Window(3, 1), "band"),
    (Chunk(4, 1), "band"),
    (Causal() & Padding([24, 13]), "sdpa_mask"),
    (Grid(4, 6, 3) & Padding([24, 13]), "sparse"),
    (Window(2, 2), "reference"),
    (Window(3, 1), "auto"),
]


def _inputs(*shape: int, seed: int) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(3)]


def _out_and_grads(q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, backend: str, up: Tensor) -> list[Tensor]:
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = attend(q, k, v, mask, backend=backend)
    (out * up.to(out.dtype)).sum().backward()
    return [out, q.grad, k.grad, v.grad]


@pytest.mark.parametrize(("mask", "backend"), CASES, ids=[f"{b}-{m!r}" for m, b in CASES])
def test_bf16_inputs_within_tolerance_of_fp64(mask: Mask | None, backend: str) -> None:
    q, k, v = _inputs(2, 2, 24, 16, seed=0)
    up = torch.randn(2, 2, 24, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref = _out_and_grads(q, k, v, mask, "reference", up)
    low = _out_and_grads(*(t.bfloat16() for t in (q, k, v)), mask, backend, up)
    for name, got, want in zip(("out", "dq", "dk", "dv"), low, ref):
        assert got.dtype == torch.bfloat16, name
        torch.testing.assert_close(got.double(), want, **BF16, msg=lambda m, n=name: f"{backend} {n}: {m}")


def test_bf16_graph_inputs_within_tolerance_of_fp64() -> None:
    n = 40
    graph = Graph(torch.randint(0, n, (2, 300), generator=torch.Generator().manual_seed(2)), n)
    q, k, v = _inputs(n, 2, 8, seed=3)
    up = torch.randn(n, 2, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    ref = _out_and_grads(q, k, v, graph, "reference", up)
    low = _out_and_grads(*(t.bfloat16() for t in (q, k, v)), graph, "sparse", up)
    for got, want in zip(low, ref):
        torch.testing.assert_close(got.double(), want, **BF16)


@pytest.mark.parametrize("mask", [None, Window(3, 1), Grid(4, 6, 3), Causal() & Padding([24, 13])], ids=repr)
def test_autocast_bf16_encoder_close_to_fp32(mask: Mask | None) -> None:
    torch.manual_seed(0)
    encoder = Encoder(32, 4, 2, 64, dropout=0.0)
    x = torch.randn(2, 24, 32)

    def run(autocast: bool) -> tuple[Tensor, list[Tensor]]:
        encoder.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = encoder(x, mask)
        out.float().square().mean().backward()
        return out.float().detach(), [p.grad.clone() for p in encoder.parameters()]

    (out32, grads32), (out16, grads16) = run(False), run(True)
    assert (out16 - out32).norm() / out32.norm() < 3e-2
    for p, g32, g16 in zip(encoder.parameters(), grads32, grads16):
        assert p.dtype == g16.dtype == torch.float32 and bool(g16.isfinite().all())
        if g32.norm() > 1e-6:
            assert torch.nn.functional.cosine_similarity(g16.flatten(), g32.flatten(), dim=0) > 0.99
