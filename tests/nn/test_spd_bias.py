"""ShortestPathBias: one learned bias per head and hop distance, on the allowed pairs."""

from __future__ import annotations

import torch

from attnmm import attend
from attnmm.masks import Graph, SameGraph
from attnmm.masks.graph_helpers import k_hop
from attnmm.nn import ShortestPathBias


def test_bias_follows_the_distance_table() -> None:
    spd = ShortestPathBias(num_heads=2, max_distance=2)
    with torch.no_grad():
        spd.table.weight.copy_(torch.arange(8.0).view(4, 2))
    path = torch.tensor([[0, 1, 2], [1, 2, 3]])  # 0 -> 1 -> 2 -> 3
    mask = k_hop(path, 4, 2) | Graph(torch.arange(4).repeat(2, 1), 4)
    pairs = mask.pairs(4)
    bias = spd(mask, path, 4)
    dist = bias[:, 0] / 2
    for r, c, d in zip(pairs.row.tolist(), pairs.col.tolist(), dist.tolist()):
        assert d == r - c  # on a path the distance from c to r is r - c


def test_bias_plugs_into_attend_and_trains() -> None:
    spd = ShortestPathBias(num_heads=2, max_distance=3)
    batch = torch.tensor([0, 0, 0, 1, 1])
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    mask = SameGraph(batch)
    q = k = v = torch.randn(5, 2, 4)
    out = attend(q, k, v, mask, bias=spd(mask, edge_index, 5))  # (N, H, E)
    out.sum().backward()
    assert spd.table.weight.grad is not None and out.shape == (5, 2, 4)
