"""SameGraph: its padded form (packed Documents of the graph sizes) has the same allowed set, and attend
computes a packed problem under it, equal to the reference in values and gradients."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.attention.backends import get_backend
from attnmm.masks import Documents, Graph, SameGraph


def _batch(sizes: list[int], first: int = 0) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(first, first + len(sizes)), torch.tensor(sizes))


@pytest.mark.parametrize(("sizes", "first"), [([3, 1, 4], 0), ([2, 5], 2), ([1], 0)])
def test_the_padded_form_allows_the_same_pairs(sizes: list[int], first: int) -> None:
    mask = SameGraph(_batch(sizes, first))
    padded = mask.structure.padded
    assert isinstance(padded, Documents) and padded.layout == "padded"
    n = sum(sizes)
    assert torch.equal(padded.dense(n, n), mask.dense(n, n))
    assert mask.structure.padded is padded  # built once per mask
    assert Graph(torch.tensor([[0], [1]]), 2).structure.padded is None  # a mask without one says so


def test_attend_under_same_graph_equals_the_reference() -> None:
    torch.manual_seed(0)
    batch = _batch([30, 1, 17, 2, 40])
    mask = SameGraph(batch)
    N, H, E = batch.numel(), 3, 8
    q, k, v = (torch.randn(N, H, E, requires_grad=True) for _ in range(3))
    out = attend(q, k, v, mask)
    want = attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    want_grads = torch.autograd.grad(want.square().sum(), (q, k, v))
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_large_graphs_run_one_graph_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs of a hundred nodes and more run on fused SDPA per graph (the segments backend), not on
    the per-pair kernel; a bias per pair or returned weights keep the pairs (the sparse kernel)."""
    segments = get_backend("segments")
    calls = []
    real = segments.forward
    monkeypatch.setattr(segments, "forward", lambda *call: calls.append(call) or real(*call))
    batch = _batch([150, 120, 180, 160])
    N = batch.numel()
    q = k = v = torch.randn(N, 4, 16)
    out = attend(q, k, v, SameGraph(batch))
    assert len(calls) == 1 and out.shape == (N, 4, 16)
    bias = torch.zeros(SameGraph(batch).nnz(N), 4)
    with_bias = attend(q, k, v, SameGraph(batch), bias=bias)
    assert len(calls) == 1  # the bias needs the pairs
    torch.testing.assert_close(with_bias, out, atol=1e-5, rtol=1e-4)
