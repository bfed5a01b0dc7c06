"""The packed-documents benchmark: its lengths, its padded peer and its cases, at small sizes."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from benchmarks import packed_documents as bench
from benchmarks._cases import get_case


def test_random_lengths_compose_the_total() -> None:
    lengths = bench.random_lengths(100, 7, seed=3)
    assert lengths.shape == (7,) and int(lengths.sum()) == 100 and int(lengths.min()) >= 1
    assert torch.equal(lengths, bench.random_lengths(100, 7, seed=3))  # seeded
    assert not torch.equal(lengths, bench.random_lengths(100, 7, seed=4))


def test_benchmark_lengths_match_the_title() -> None:
    lengths = bench.random_lengths(bench.TOKENS, bench.DOCUMENTS, seed=0)
    assert int(lengths.sum()) == bench.TOKENS
    assert f"({int(lengths.min())}-{int(lengths.max())})" in get_case("documents").title


@pytest.mark.parametrize("peer", ["padded", "loop", "nested"])
@pytest.mark.parametrize("lengths", [[5, 1, 9, 3], [1], [4, 4]])
def test_peers_equal_the_reference(lengths: list[int], peer: str) -> None:
    """Each hand-written peer computes what attnmm's reference does: the padded and the loop peers
    Documents & Causal, the nested peer Documents alone."""
    lengths_t = torch.tensor(lengths)
    L = sum(lengths)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64).requires_grad_(True) for _ in range(3))
    up = torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64)

    def grads(fn):  # output and gradients of q, k, v
        out = fn(q, k, v)
        return [out, *torch.autograd.grad(out, (q, k, v), up)]

    mask = bench.mask_of(lengths_t) if peer != "nested" else bench.Documents(lengths_t)
    want = grads(lambda q, k, v: attend(q, k, v, mask, backend="reference"))
    attention = {"padded": bench.padded_attention, "loop": bench.loop_attention, "nested": bench.nested_attention}
    for got, ref in zip(grads(attention[peer](lengths_t)), want):
        torch.testing.assert_close(got, ref)


def test_cases_are_registered() -> None:
    for key in ("documents", "documents_padded", "documents_fwd"):
        case = get_case(key)
        assert case.build is bench.build
    assert get_case("documents").peer is bench.dense_peer
    assert get_case("documents_padded").peer is bench.padded_peer
    assert get_case("documents_fwd").peer is bench.flex_peer
    assert get_case("documents_loop").peer is bench.loop_peer
