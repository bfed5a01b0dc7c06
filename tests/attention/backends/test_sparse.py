"""The sparse backend equals the reference for every kind of mask and keeps no per-pair copies."""

from __future__ import annotations

import pytest
import torch
from _compare import OpSizes, compare, randn
from _strategies import graph_masks, grid_masks, sequence_masks
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from attnmm import attend
from attnmm.masks import Causal, Graph, Grid, Mask, Padding, Window

dtypes = st.sampled_from([torch.float32, torch.float64])
scores = st.sampled_from(["softmax", "relu"])


@given(st.data(), st.integers(1, 3), st.integers(1, 2), st.integers(1, 9), st.integers(0, 9), dtypes, scores)
def test_sequence_masks(data: st.DataObject, B: int, H: int, L: int, S: int, dtype: torch.dtype, score: str) -> None:
    mask = data.draw(sequence_masks(B, S, depth=3))  # And / Or / Not compositions
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = randn(B, H, L, 3, dtype=dtype, seed=seed), randn(B, H, S, 3, dtype=dtype, seed=seed + 1), randn(
        B, H, S, 2, dtype=dtype, seed=seed + 2
    )
    compare("sparse", q, k, v, mask, with_bias=data.draw(st.booleans()), score=score, seed=seed)


@given(st.data(), st.integers(1, 3), st.integers(2, 3), st.integers(1, 9), st.integers(0, 9), dtypes, scores)
def test_token_major_inputs(
    data: st.DataObject, B: int, H: int, L: int, S: int, dtype: torch.dtype, score: str
) -> None:
    """Inputs lying as (B, L, H, E) in memory run in the pattern's "token" order, with no copies."""
    mask = data.draw(sequence_masks(B, S, depth=2))
    seed = data.draw(st.integers(0, 2**16))
    q = randn(B, L, H, 3, dtype=dtype, seed=seed).transpose(1, 2)  # (B, H, L, E), token-major memory
    k = randn(B, S, H, 3, dtype=dtype, seed=seed + 1).transpose(1, 2)
    v = randn(B, S, H, 2, dtype=dtype, seed=seed + 2).transpose(1, 2)
    compare("sparse", q, k, v, mask, with_bias=data.draw(st.booleans()), score=score, seed=seed)


@pytest.mark.parametrize("layout", ["head", "token"])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("one_call", [False, True])
def test_pattern_kernels_against_dense_blocks(
    layout: str, batched: bool, one_call: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every (item, head) block of the CSR kernels equals dense products with the pattern's values, the
    operands read in either memory order (heads stacked, or the heads of a token together), block by
    block or in one call over every block."""
    from attnmm.attention.backends import _csr
    from attnmm.attention.backends._csr import Blocks, CSRPattern, as_heads_second, expand, sampled, segment_sum, spmm

    monkeypatch.setattr(_csr, "FUSED_VALUES", 1 << 18 if one_call else 0)  # small blocks together, or not

    B, H, L, S, E = 3, 2, 7, 5, 4
    mask = Padding([5, 0, 3]) & ~Causal() if batched else Window(2, 1) | Graph(torch.tensor([[4], [0]]), (S, L))
    pairs = mask.pairs(L, S, B if batched else None)
    pattern = CSRPattern.from_pairs(pairs)
    assert pattern.items == (B if batched else 1) and pattern.col.dtype == torch.int32
    blocks = Blocks(pattern, B, H)

    def operand(n: int, seed: int) -> torch.Tensor:  # (B, H, n, E) in ``layout``'s memory order
        if layout == "token":
            return randn(B, n, H, E, seed=seed).transpose(1, 2)
        return randn(B, H, n, E, seed=seed)

    x, y = operand(L, 1), operand(S, 2)
    allowed = pairs.expand(B).to_dense()  # (B, L, S)
    values = sampled(blocks, x, y).t()  # (V, H) in weight_pairs() order
    dense = torch.zeros(B, H, L, S, dtype=values.dtype)
    wide = pairs.expand(B)
    dense[wide.batch, :, wide.row, wide.col] = values
    torch.testing.assert_close(dense, (x @ y.transpose(-1, -2)) * allowed.unsqueeze(1))
    torch.testing.assert_close(segment_sum(blocks, values.t()).view(H, B, L), dense.sum(-1).permute(1, 0, 2))
    flat_row = torch.arange(B * L).expand(H, -1)  # (H, B * L)
    assert torch.equal(expand(blocks, flat_row), (wide.batch * L + wide.row).expand(H, -1))
    for transpose in (False, True):
        z = operand(L if transpose else S, 3)
        got, order = spmm(blocks, values.t(), z, transpose=transpose)
        assert order == ("heads_first" if one_call else layout)  # written where the operand lies, or fused
        want = (dense.transpose(-1, -2) if transpose else dense) @ z
        torch.testing.assert_close(as_heads_second(got, order), want)


@given(st.data(), st.integers(1, 2), st.integers(1, 2), dtypes, scores)
def test_grid_masks(data: st.DataObject, B: int, H: int, dtype: torch.dtype, score: str) -> None:
    mask, P = data.draw(grid_masks(B))  # dilation, border="shift", Padding
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = (randn(B, H, P, 4, dtype=dtype, seed=seed + i) for i in range(3))
    compare("sparse", q, k, v, mask, with_bias=True, score=score, seed=seed)


@given(graph_masks(), st.integers(1, 3), dtypes, scores, st.booleans(), st.integers(0, 2**16))
def test_graph_masks(
    graph: tuple[Graph, int, int], H: int, dtype: torch.dtype, score: str, bias: bool, seed: int
) -> None:
    mask, N_dst, N_src = graph  # directed, bipartite, duplicate edges, isolated nodes
    q = randn(N_dst, H, 4, dtype=dtype, seed=seed)
    k, v = randn(N_src, H, 4, dtype=dtype, seed=seed + 1), randn(N_src, H, 3, dtype=dtype, seed=seed + 2)
    compare("sparse", q, k, v, mask, with_bias=bias, score=score, seed=seed)


def test_batch_of_graphs_is_block_diagonal() -> None:
    from torch_geometric.data import Batch, Data

    graphs = [Data(edge_index=torch.randint(0, n, (2, 3 * n)), num_nodes=n) for n in (4, 7, 1)]
    batch = Batch.from_data_list(graphs)
    mask = Graph(batch.edge_index, batch.num_nodes)
    q, k, v = (randn(batch.num_nodes, 2, 5, seed=s) for s in range(3))
    compare("sparse", q, k, v, mask, with_bias=True)
    out = attend(q, k, v, mask, backend="sparse")  # each graph alone gives the same output
    for i, g in enumerate(graphs):
        lo, hi = int(batch.ptr[i]), int(batch.ptr[i + 1])
        alone = attend(q[lo:hi], k[lo:hi], v[lo:hi], Graph(g.edge_index, g.num_nodes), backend="sparse")
        torch.testing.assert_close(out[lo:hi], alone)


@pytest.mark.parametrize(
    "mask",
    [Padding([0, 6]) & Grid(2, 3, 3), (Window(1, 0) | Window(0, 1)) & Padding([2, 0]), ~Causal() & Padding([6, 3])],
    ids=repr,
)
def test_empty_rows_give_zero_output_and_gradient(mask: Mask) -> None:
    q, k, v = (randn(2, 2, 6, 4, seed=s) for s in range(3))
    out, _, dq, _, _, _ = compare("sparse", q, k, v, mask, with_bias=True)
    empty = ~mask.dense(6, 6, 2).any(-1)  # (B, L)
    assert empty.any()
    assert (out.permute(0, 2, 1, 3)[empty] == 0).all()
    assert (dq.permute(0, 2, 1, 3)[empty] == 0).all()


def test_no_keys_at_all() -> None:
    q, k, v = randn(2, 1, 3, 4, seed=0), randn(2, 1, 0, 4, seed=1), randn(2, 1, 0, 2, seed=2)
    compare("sparse", q, k, v, Window(1, 1))
    graph = Graph(torch.zeros(2, 0, dtype=torch.long), 4)
    compare("sparse", *(randn(4, 2, 3, seed=s) for s in range(3)), graph, with_bias=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype: torch.dtype) -> None:
    q, k, v = (randn(2, 2, 25, 16, dtype=dtype, seed=s) for s in range(3))
    compare("sparse", q, k, v, Grid(5, 5, 3, border="shift") & Padding([25, 11]), with_bias=True)


def test_dropout_uses_the_returned_weights() -> None:
    n = 50
    mask = Graph(torch.randint(0, n, (2, 600)), n)
    q, k, v = (randn(n, 2, 8, seed=s).requires_grad_(True) for s in range(3))
    ref = attend(q, k, v, mask, backend="reference", return_weights=True)[1].values
    out, w = attend(q, k, v, mask, backend="sparse", dropout_p=0.25, return_weights=True)
    kept = w.values != 0
    torch.testing.assert_close(w.values[kept], ref[kept] / 0.75)
    assert 0.15 < 1 - kept.double().mean() < 0.35
    dense = w.to_dense(n, n)  # (H, L, S)
    torch.testing.assert_close(out, (dense @ v.transpose(0, 1)).transpose(0, 1))


def test_no_per_pair_copies_of_keys_or_values() -> None:
    N, M, H, E = 300, 3000, 2, 16
    mask = Graph(torch.randint(0, N, (2, M)), N)
    nnz = mask.num_edges
    q, k, v = (randn(N, H, E, dtype=torch.float32, seed=s).requires_grad_(True) for s in range(3))
    bias = torch.randn(nnz, H, requires_grad=True)
    sizes = OpSizes()
    with sizes:
        out, w = attend(q, k, v, mask, bias=bias, backend="sparse", return_weights=True)
        (out.sum() + w.values.sum()).backward()
    assert sizes.largest < nnz * E, f"{sizes.largest_op} made a tensor of {sizes.largest} elements"


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dropout_p", [0.0, 0.4])
def test_gradient_sinks(monkeypatch: pytest.MonkeyPatch, fused: bool, dropout_p: float) -> None:
    """Given sinks, the kernel adds its input gradients into them (what they held stays) and returns none
    for those inputs; the gradients are those it returns without sinks, dropout's draws included."""
    from attnmm.attention.backends import _csr, get_backend
    from attnmm.attention.planner import forms_of
    from attnmm.attention.problem import GradSinks, Inputs, Problem

    if not fused:
        monkeypatch.setattr(_csr, "FUSED_VALUES", 0)
    mask = Window(2, 1) & Padding([7, 5])
    backend = get_backend("sparse")

    def run(sinks: GradSinks | None) -> tuple[Tensor, list[Tensor | None]]:
        q, k, v = (randn(2, 3, 7, 4, seed=s).requires_grad_(True) for s in range(3))
        problem = Problem.of(q, k, v, mask, scale=0.5, dropout_p=dropout_p)
        torch.manual_seed(1)
        out, _ = backend.forward(problem, forms_of(problem), Inputs(q, k, v, sinks=sinks))
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        return out, list(torch.autograd.grad(out, [q, k, v], g, allow_unused=True))

    out, plain = run(None)
    held = [torch.full((2, 3, 7, 4), 0.5, dtype=torch.float64) for _ in range(3)]
    sinks = GradSinks(held[0], held[1], None)  # the values' gradient is returned
    out_s, returned = run(sinks)
    torch.testing.assert_close(out_s, out)
    assert returned[0] is None and returned[1] is None and returned[2] is not None
    torch.testing.assert_close(held[0], plain[0] + 0.5)
    torch.testing.assert_close(held[1], plain[1] + 0.5)
    torch.testing.assert_close(returned[2], plain[2])
