"""attend() against the oracles: a per-query loop and the dense reference, for every backend."""

from __future__ import annotations

import math

import pytest
import torch
from _oracle import grads, loop_attend, supporting_backends
from _strategies import documents_masks, graph_masks, grid_masks, same_graph_masks, segments_masks, sequence_masks
from hypothesis import given
from hypothesis import strategies as st

from attnmm import attend
from attnmm.masks import Causal, Chunk, Full, Graph, Mask, Padding, Window

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-8), torch.float32: dict(atol=2e-5, rtol=1e-4)}


def rand(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(True)


def check_problem(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Mask | None,
    *,
    score: str = "softmax",
    with_bias: bool = False,
    seed: int = 0,
) -> None:
    """Reference equals the loop oracle; every supporting backend equals the reference (values, grads)."""
    dtype = q.dtype
    tol = TOL[dtype]
    packed = q.dim() == 3
    L, S, H = (q.size(0), k.size(0), q.size(1)) if packed else (q.size(2), k.size(2), q.size(1))
    B = 1 if packed else q.size(0)
    m = mask if mask is not None else Full()
    P = m.pairs(L, S, B if m.batched else None).nnz
    bias = rand(P, H, dtype=dtype, seed=seed + 7) if with_bias else None
    inputs = [q, k, v] + ([bias] if bias is not None else [])
    kwargs = dict(score=score, bias=bias)

    ref, w = attend(q, k, v, mask, backend="reference", return_weights=True, **kwargs)  # type: ignore[arg-type]
    assert torch.isfinite(ref).all()
    # the reference equals the loop oracle
    to_padded = (lambda t: t.transpose(0, 1).unsqueeze(0)) if packed else (lambda t: t)
    loop = loop_attend(*(to_padded(t.detach()) for t in (q, k, v)), mask, 1 / math.sqrt(q.size(-1)), score, bias)
    loop = loop.squeeze(0).transpose(0, 1) if packed else loop
    torch.testing.assert_close(ref.detach(), loop, **tol)
    ref_grads = grads(ref, inputs, seed)
    assert all(torch.isfinite(g).all() for g in ref_grads)

    for name in supporting_backends(q, k, v, mask, **kwargs):
        out = attend(q, k, v, mask, backend=name, **kwargs)  # type: ignore[arg-type]
        torch.testing.assert_close(out, ref, **tol, msg=lambda m, name=name: f"backend {name}: {m}")
        for g_ref, g in zip(ref_grads, grads(out, inputs, seed)):
            torch.testing.assert_close(g, g_ref, **tol, msg=lambda m, name=name: f"{name} grad: {m}")
        try:
            _, w2 = attend(q, k, v, mask, backend=name, return_weights=True, **kwargs)  # type: ignore[arg-type]
        except ValueError:
            continue  # this backend does not return weights
        torch.testing.assert_close(w2.values, w.values, **tol)


dtypes = st.sampled_from([torch.float32, torch.float64])
scores = st.sampled_from(["softmax", "relu"])


@given(st.data(), st.integers(1, 3), st.integers(1, 2), st.integers(1, 9), st.integers(0, 9), dtypes, scores)
def test_sequence_masks(data: st.DataObject, B: int, H: int, L: int, S: int, dtype: torch.dtype, score: str) -> None:
    mask = data.draw(st.one_of(st.none(), sequence_masks(B, S)))
    E, Ev = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = rand(B, H, L, E, dtype=dtype, seed=seed), rand(B, H, S, E, dtype=dtype, seed=seed + 1), rand(
        B, H, S, Ev, dtype=dtype, seed=seed + 2
    )
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@given(st.data(), st.integers(1, 2), dtypes, scores)
def test_grid_masks(data: st.DataObject, B: int, dtype: torch.dtype, score: str) -> None:
    mask, P = data.draw(grid_masks(B))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = (rand(B, 2, P, 3, dtype=dtype, seed=seed + i) for i in range(3))
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@given(st.data(), st.integers(1, 2), st.integers(1, 9), st.integers(1, 9), dtypes, scores)
def test_documents_masks(data: st.DataObject, B: int, L: int, S: int, dtype: torch.dtype, score: str) -> None:
    mask = data.draw(documents_masks(B, min(L, S)))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = rand(B, 2, L, 3, dtype=dtype, seed=seed), rand(B, 2, S, 3, dtype=dtype, seed=seed + 1), rand(
        B, 2, S, 2, dtype=dtype, seed=seed + 2
    )
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@given(st.data(), st.integers(1, 2), dtypes, scores)
def test_segments_masks(data: st.DataObject, B: int, dtype: torch.dtype, score: str) -> None:
    mask, L = data.draw(segments_masks(B))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = (rand(B, 2, L, 3, dtype=dtype, seed=seed + i) for i in range(3))
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@given(st.data(), graph_masks(), dtypes, scores)
def test_graph_masks_packed(data: st.DataObject, drawn: tuple[Graph, int, int], dtype: torch.dtype, score: str) -> None:
    mask, N, M = drawn
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = rand(N, 2, 4, dtype=dtype, seed=seed), rand(M, 2, 4, dtype=dtype, seed=seed + 1), rand(
        M, 2, 3, dtype=dtype, seed=seed + 2
    )
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@given(st.data(), same_graph_masks(), dtypes, scores)
def test_same_graph_masks_packed(data: st.DataObject, drawn: tuple[Mask, int], dtype: torch.dtype, score: str) -> None:
    mask, n = drawn
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = (rand(n, 2, 4, dtype=dtype, seed=seed + i) for i in range(3))
    check_problem(q, k, v, mask, score=score, with_bias=data.draw(st.booleans()), seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "mask",
    [
        Padding([0, 3]),
        Window(1, 1) & Padding([0, 0]),
        ~Full(),
        Chunk(2, 0) & Padding([1, 0]),
        Window(0, 0) & ~Window(0, 0),
    ],
    ids=repr,
)
def test_empty_allowed_sets_give_zero_not_nan(mask: Mask, dtype: torch.dtype) -> None:
    q, k, v = (rand(2, 2, 5, 4, dtype=dtype, seed=i) for i in range(3))
    dense = mask.dense(5, 5, 2 if mask.batched else None)
    empty = ~dense.any(-1)  # (B, L) or (L,)
    check_problem(q, k, v, mask)
    for name in ["reference", *supporting_backends(q, k, v, mask)]:
        out = attend(q, k, v, mask, backend=name)
        assert torch.isfinite(out).all()
        rows = out.permute(0, 2, 1, 3)[empty.expand(2, 5)] if empty.dim() == 1 else out.permute(0, 2, 1, 3)[empty]
        assert torch.equal(rows, torch.zeros_like(rows)), name
        gq, gk, gv = grads(out, [q, k, v])
        assert all(torch.isfinite(g).all() for g in (gq, gk, gv))
        gq_rows = gq.permute(0, 2, 1, 3)[empty.expand(2, 5) if empty.dim() == 1 else empty]
        assert torch.equal(gq_rows, torch.zeros_like(gq_rows)), name


def test_all_keys_masked_graph_node() -> None:
    # node 0 has no incoming edge: zero output and zero gradient for it
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)
    x = rand(3, 2, 4, dtype=torch.float32, seed=0)
    out = attend(x, x, x, g)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    check_problem(x, x, x, g)


@pytest.mark.parametrize("mask", [None, Full(), Causal()], ids=repr)
def test_sdpa_is_used_and_matches(mask: Mask | None) -> None:
    q, k, v = (rand(2, 3, 6, 4, dtype=torch.float64, seed=i) for i in range(3))
    assert "sdpa" in supporting_backends(q, k, v, mask)
    check_problem(q, k, v, mask)


def test_length_one_and_rectangular() -> None:
    for L, S in [(1, 1), (1, 7), (7, 1), (3, 8), (8, 3)]:
        q, k, v = rand(1, 1, L, 2, dtype=torch.float64, seed=L), rand(1, 1, S, 2, dtype=torch.float64, seed=S), rand(
            1, 1, S, 3, dtype=torch.float64, seed=9
        )
        for mask in [None, Causal(), Window(1, 2), Chunk(2, 1), Padding([S]) & Causal()]:
            check_problem(q, k, v, mask)


def test_no_keys() -> None:
    q, k, v = rand(1, 2, 3, 4, dtype=torch.float32, seed=0), torch.randn(1, 2, 0, 4), torch.randn(1, 2, 0, 5)
    out = attend(q, k, v)
    assert out.shape == (1, 2, 3, 5) and not out.any()


def test_return_weights_form() -> None:
    q, k, v = (rand(2, 3, 5, 4, dtype=torch.float64, seed=i) for i in range(3))
    mask = Window(1, 0) & Padding([5, 2])
    out, w = attend(q, k, v, mask, return_weights=True)
    assert w.batch is not None and w.values.shape == (w.row.numel(), 3)
    dense = w.to_dense(5, 5, 2)
    torch.testing.assert_close(dense.sum(-1)[0], torch.ones(3, 5, dtype=torch.float64))
    torch.testing.assert_close(dense @ v, out)
    # packed layout: PyG-style (2, M) edge index, no batch
    g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
    x = rand(3, 2, 4, dtype=torch.float64, seed=5)
    _, wg = attend(x, x, x, g, return_weights=True)
    assert wg.batch is None
    assert torch.equal(wg.edge_index, torch.tensor([[2, 0, 1], [0, 1, 2]]))
    torch.testing.assert_close(wg.values, torch.ones(3, 2, dtype=torch.float64))


def test_scale_and_dropout() -> None:
    q, k, v = (rand(1, 2, 6, 4, dtype=torch.float64, seed=i) for i in range(3))
    a = attend(q, k, v, Window(2, 2), scale=0.3, backend="reference")
    b = attend(q * 0.3 * 2, k, v, Window(2, 2), backend="reference")  # 1/sqrt(4) = 0.5
    torch.testing.assert_close(a, b)
    torch.manual_seed(0)
    d = attend(q, k, v, Window(2, 2), dropout_p=0.5)
    assert not torch.allclose(d, attend(q, k, v, Window(2, 2)))


def test_half_precision_inputs() -> None:
    q, k, v = (torch.randn(1, 2, 6, 8, dtype=torch.bfloat16) for _ in range(3))
    out = attend(q, k, v, Window(1, 1) & Padding([0]))
    assert out.dtype == torch.bfloat16 and not out.any()
    ref = attend(q.double(), k.double(), v.double(), Window(1, 1))
    torch.testing.assert_close(attend(q, k, v, Window(1, 1)).double(), ref, atol=2e-2, rtol=2e-2)
