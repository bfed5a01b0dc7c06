"""feature_knn against a brute-force definition: for each node, the k most similar other nodes of its graph."""

from __future__ import annotations

import pytest
import torch

from attnmm.common.feature_knn import feature_knn


def _brute_force(x: torch.Tensor, k: int, batch: torch.Tensor, metric: str) -> torch.Tensor:
    """Dense (N, N) bool: row i marks i's neighbours, chosen one by one from a Python sort."""
    n = x.size(0)
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        candidates = []
        for j in range(n):
            if j == i or batch[j] != batch[i]:
                continue
            if metric == "cosine":
                s = float(torch.dot(x[i], x[j]) / (x[i].norm() * x[j].norm()).clamp(min=1e-12))
            else:
                s = -float((x[i] - x[j]).norm())
            candidates.append((-s, j))
        for _, j in sorted(candidates)[:k]:
            out[i, j] = True
    return out


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("chunk_size", [1, 4, 1024])
@pytest.mark.parametrize("seed", range(3))
def test_matches_brute_force(metric: str, chunk_size: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(13, 5, generator=g)
    k = 1 + seed
    got = feature_knn(x, k, metric=metric, chunk_size=chunk_size).dense(13)
    assert torch.equal(got, _brute_force(x, k, torch.zeros(13, dtype=torch.long), metric))
    assert torch.equal(got.sum(1), torch.full((13,), k))  # exactly k neighbours each
    assert not got.diagonal().any()


def test_batch_stays_inside_graphs_and_small_graphs_take_every_node() -> None:
    x = torch.randn(9, 3, generator=torch.Generator().manual_seed(0))
    batch = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 2])  # graphs of 6, 2 and 1 nodes
    got = feature_knn(x, 3, batch=batch, chunk_size=2).dense(9)
    assert torch.equal(got, _brute_force(x, 3, batch, "cosine"))
    assert got[6, 7] and got[7, 6] and not got[8].any()  # 1 other node: taken; alone: none
    assert not got[:6, 6:].any()


def test_ties_go_to_the_lower_index_and_binary_features() -> None:
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # nodes 0-2 identical
    got = feature_knn(x, 1).dense(4)
    assert got[0, 1] and got[1, 0] and got[2, 0]  # equal scores: the lowest index
    assert got[3, 0]  # every other node scores 0: node 0


def test_errors_say_what_to_pass() -> None:
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match=r"shape \(N, F\)"):
        feature_knn(x[0], 1)
    with pytest.raises(ValueError, match="k must be"):
        feature_knn(x, 0)
    with pytest.raises(ValueError, match="metric must be"):
        feature_knn(x, 1, metric="dot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be sorted"):
        feature_knn(x, 1, batch=torch.tensor([1, 0, 0, 1]))
    with pytest.raises(ValueError, match=r"shape \(N,\)"):
        feature_knn(x, 1, batch=torch.tensor([0, 0]))
    assert feature_knn(torch.zeros(0, 2), 2).num_edges == 0


def test_a_larger_graph_in_chunks_has_k_neighbours_each() -> None:
    n = 3000
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(1))
    mask = feature_knn(x, 5, chunk_size=256)
    assert mask.num_edges == 5 * n
