from __future__ import annotations

import pytest
import torch

from attnmm.masks import Graph


def test_source_to_target_flow() -> None:
    # edge j -> i lets query i attend key j (PyG's source_to_target flow)
    edge_index = torch.tensor([[0, 0, 2], [1, 2, 1]])
    dense = Graph(edge_index, 3).dense(3)
    expected = torch.zeros(3, 3, dtype=torch.bool)
    expected[1, 0] = expected[2, 0] = expected[1, 2] = True
    assert torch.equal(dense, expected)


def test_directed_not_symmetric() -> None:
    g = Graph(torch.tensor([[0], [1]]), 2)
    assert g.picture(2) == "0 0\n1 0"


def test_duplicates_count_once_and_repr() -> None:
    g = Graph(torch.tensor([[0, 0, 1], [1, 1, 0]]), 2)
    assert g.num_edges == 2 and g.nnz(2) == 2
    assert repr(g) == "Graph(num_nodes=2, num_edges=2)"


def test_bipartite() -> None:
    g = Graph(torch.tensor([[0, 3], [1, 0]]), (4, 2))  # 4 source (key) nodes, 2 target (query) nodes
    assert repr(g) == "Graph(num_nodes=(4, 2), num_edges=2)"
    assert g.picture(2, 4) == "0 0 0 1\n1 0 0 0"
    msg = r"2 query \(target\) nodes and 4 key \(source\) nodes, but the input has L=4 queries and S=4 keys"
    with pytest.raises(ValueError, match=msg):
        g.dense(4, 4)


def test_block_diagonal_batch_of_graphs() -> None:
    from torch_geometric.data import Batch, Data

    g1 = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    g2 = Data(edge_index=torch.tensor([[0], [2]]), num_nodes=3)
    batch = Batch.from_data_list([g1, g2])
    dense = Graph(batch.edge_index, batch.num_nodes).dense(5)
    assert not dense[:2, 2:].any() and not dense[2:, :2].any()
    assert dense[4, 2] and dense[0, 1] and dense[1, 0]


def test_empty_graph() -> None:
    g = Graph(torch.empty(2, 0, dtype=torch.long), 3)
    assert g.nnz(3) == 0 and not g.dense(3).any()


def test_bad_edge_index() -> None:
    with pytest.raises(ValueError, match=r"out of range: sources must lie in \[0, 3\) .* max source 3"):
        Graph(torch.tensor([[3], [0]]), 3)
    with pytest.raises(ValueError, match="got min -1"):
        Graph(torch.tensor([[-1], [0]]), 3)
    with pytest.raises(TypeError, match="integer tensor of shape \\(2, M\\), got dtype torch.float32"):
        Graph(torch.tensor([[0.0], [1.0]]), 3)
    with pytest.raises(ValueError, match=r"shape \(2, M\), got shape \(3, 1\)"):
        Graph(torch.tensor([[0], [1], [2]]), 3)
    with pytest.raises(TypeError, match="got list"):
        Graph([[0], [1]], 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="packed layout .* got batch size 2"):
        Graph(torch.tensor([[0], [1]]), 2).dense(2, 2, batch_size=2)
