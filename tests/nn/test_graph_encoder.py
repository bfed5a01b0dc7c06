"""GraphAttentionEncoder: a stack of AttentionConv layers under one mask."""

from __future__ import annotations

import torch

from attnmm.masks import Graph
from attnmm.nn import AttentionConv, GraphAttentionEncoder


def test_layers_and_weights() -> None:
    enc = GraphAttentionEncoder(16, 4, out_channels=5, num_layers=3, heads=2, dropout=0.0).eval()
    assert len(enc.convs) == 2 and isinstance(enc.out, AttentionConv)
    g = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)
    out, weights = enc(torch.randn(4, 16), g, return_weights=True)
    assert out.shape == (4, 5) and len(weights) == 3
    pairs, alpha = weights[0]
    assert pairs.shape == (2, 4) and alpha.shape == (4, 2)
    torch.testing.assert_close(alpha.sum(0), torch.full((2,), 4.0))  # one incoming edge per node


def test_first_layer_equals_a_single_conv() -> None:
    enc = GraphAttentionEncoder(6, 3, out_channels=2, num_layers=1, heads=1, dropout=0.0).eval()
    g = Graph(torch.tensor([[0, 1], [1, 0]]), 2)
    x = torch.randn(2, 6)
    torch.testing.assert_close(enc(x, g), enc.out(x, g.edge_index))
