"""Graph mask helpers: each against a brute-force definition on small random graphs."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnmm.masks import Full, Graph, SameGraph
from attnmm.masks.graph_helpers import expander, graph_mask, hop_distance, k_hop, self_loops, virtual_nodes


def _random_edges(n: int, m: int, seed: int) -> torch.Tensor:
    return torch.randint(0, n, (2, m), generator=torch.Generator().manual_seed(seed))


def _distances(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """All-pairs shortest path lengths d[i, j] from j to i (Floyd-Warshall; inf when unreachable)."""
    d = torch.full((n, n), float("inf"))
    d[edge_index[1], edge_index[0]] = 1.0
    d.fill_diagonal_(0.0)
    for k in range(n):
        d = torch.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
    return d


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_hop_matches_brute_force(seed: int, k: int) -> None:
    n = 9
    edge_index = _random_edges(n, 14, seed)
    dense = k_hop(edge_index, n, k).dense(n)
    adj = torch.zeros(n, n, dtype=torch.long)
    adj[edge_index[1], edge_index[0]] = 1
    reach, power = torch.zeros(n, n, dtype=torch.long), torch.eye(n, dtype=torch.long)
    for _ in range(k):
        power = (adj @ power).clamp(max=1)
        reach |= power
    assert torch.equal(dense, reach.bool())


@pytest.mark.parametrize("seed", range(3))
def test_hop_distance_matches_floyd_warshall(seed: int) -> None:
    n, cap = 8, 3
    edge_index = _random_edges(n, 12, seed)
    pairs = Full().pairs(n)
    got = hop_distance(edge_index, n, pairs, max_distance=cap).view(n, n)
    want = _distances(edge_index, n).clamp(max=cap + 1).long()
    assert torch.equal(got, want)


def test_graph_mask_of_a_batch_is_block_diagonal() -> None:
    from torch_geometric.data import Batch, Data

    graphs = [Data(edge_index=_random_edges(n, 2 * n, n), num_nodes=n) for n in (3, 4)]
    mask = graph_mask(Batch.from_data_list(graphs), self_loops=True)
    dense = mask.dense(7)
    assert not dense[:3, 3:].any() and not dense[3:, :3].any()
    assert dense.diagonal().all()
    assert isinstance(mask, Graph)


def test_self_loops_and_union() -> None:
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3) | self_loops(3)
    assert torch.equal(g.dense(3), torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]]).bool())


def test_virtual_nodes_link_each_graph_to_its_hub() -> None:
    batch = torch.tensor([0, 0, 1, 1, 1])
    dense = virtual_nodes(5, batch).dense(7)
    for i, g in itertools.product(range(5), range(2)):
        linked = bool(batch[i] == g)
        assert bool(dense[i, 5 + g]) == linked and bool(dense[5 + g, i]) == linked
    assert dense[5, 5] and dense[6, 6] and not dense[5, 6]
    assert not dense[:5, :5].any()


def test_expander_stays_inside_graphs_and_is_regular() -> None:
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor([10, 20, 30]))
    g = expander(60, degree=4, batch=batch, generator=torch.Generator().manual_seed(0))
    pairs = g.pairs(60)
    assert torch.equal(batch[pairs.row], batch[pairs.col])
    in_degree = torch.bincount(pairs.row, minlength=60)
    assert int(in_degree.max()) <= 4 and float(in_degree.float().mean()) > 3.0
    with pytest.raises(ValueError, match="degree must be even"):
        expander(10, degree=3)


def test_same_graph_pairs_and_errors() -> None:
    batch = torch.tensor([0, 0, 1, 1, 1])
    m = SameGraph(batch)
    assert torch.equal(m.pairs(5).to_dense(), m.dense(5))
    assert m.nnz(5) == 4 + 9
    with pytest.raises(ValueError, match="must be sorted"):
        SameGraph(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="describes 5 nodes"):
        m.dense(4)


def test_helpers_cost_follows_nnz() -> None:
    n = 50_000  # a dense N x N form would need 2.5 GB
    edge_index = _random_edges(n, 100_000, 0)
    assert k_hop(edge_index, n, 2).num_edges < 600_000
    assert virtual_nodes(n).num_edges == 2 * n + 1
