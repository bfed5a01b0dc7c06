"""The sparse backend equals the reference for every kind of mask and keeps no per-pair copies."""

from __future__ import annotations

import pytest
import torch
from _compare import OpSizes, compare, randn
from _strategies import graph_masks, grid_masks, sequence_masks
from hypothesis import given
from hypothesis import strategies as st

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
def test_pattern_layouts_agree(layout: str) -> None:
    from attnmm.attention.backends._csr import CSRPattern, from_pairs, sampled, spmm, to_pairs

    N, H, E = 9, 3, 4
    pairs = Graph(torch.randint(0, N, (2, 30), generator=torch.Generator().manual_seed(0)), N).pairs(N, N, None)
    pattern = CSRPattern.block_diagonal(pairs, 1, H, layout)  # type: ignore[arg-type]
    x, y = randn(N, H, E, seed=1), randn(N, H, E, seed=2)  # (N, H, E)
    rows = (lambda t: t.reshape(N * H, E)) if layout == "token" else (lambda t: t.transpose(0, 1).reshape(N * H, E))
    scores = to_pairs(pattern, sampled(pattern, rows(x), rows(y)))  # (P, H)
    expected = (x[pairs.row] * y[pairs.col]).sum(-1)
    torch.testing.assert_close(scores, expected)
    values = randn(pairs.nnz, H, seed=3)
    assert torch.equal(to_pairs(pattern, from_pairs(pattern, values)), values)
    dense = torch.zeros(H, N, N, dtype=values.dtype)
    dense[:, pairs.row, pairs.col] = values.t()
    for transpose in (False, True):
        got = spmm(pattern, from_pairs(pattern, values), rows(y), transpose=transpose)
        A = dense.transpose(1, 2) if transpose else dense
        want = A @ y.transpose(0, 1)  # (H, N, E)
        got = got.view(N, H, E).transpose(0, 1) if layout == "token" else got.view(H, N, E)
        torch.testing.assert_close(got, want)


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
