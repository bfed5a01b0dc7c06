"""The graph encoders return their attention weights when asked: the output is the same as without,
and each query's weights form a softmax over its allowed set."""

from __future__ import annotations

import torch
from torch_geometric.nn import GCNConv

from attnmm.masks import Graph, SameGraph
from attnmm.nn import GPSEncoder, PropagationEncoder


def _rows_sum_to_one(w, n: int) -> None:
    dense = w.to_dense(n, n)  # (H, N, N) or (1, H, N, N)
    sums = dense.reshape(-1, n, n).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_gps_encoder_returns_the_weights_of_every_layer() -> None:
    torch.manual_seed(0)
    batch = torch.tensor([0, 0, 0, 1, 1])
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 0, 4]])
    enc = GPSEncoder(8, num_layers=2, heads=2, local=GCNConv(8, 8)).eval()
    x = torch.randn(5, 8)
    mask = SameGraph(batch)

    class T:  # the adapter's graph tokens, as far as the encoder reads them
        pass

    tokens = T()
    tokens.edge_index, tokens.batch, tokens.edge_attr = edge_index, batch, None
    plain = enc(x, mask, tokens=tokens)
    out, weights = enc(x, mask, tokens=tokens, return_weights=True)
    torch.testing.assert_close(out, plain)
    assert len(weights) == 2
    for w in weights:
        _rows_sum_to_one(w, 5)
        dense = w.to_dense(5, 5).reshape(-1, 5, 5)
        assert float(dense[:, 0, 3:].detach().abs().sum()) == 0.0  # no weight across graphs


def test_propagation_encoder_returns_the_weights_of_every_step() -> None:
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])
    mask = Graph(edge_index, 4) | Graph(torch.arange(4).repeat(2, 1), 4)
    enc = PropagationEncoder(6, 8, 3, steps=3, scores="additive", heads=2).eval()
    x = torch.randn(4, 6)
    plain = enc(x, mask)
    out, weights = enc(x, mask, return_weights=True)
    torch.testing.assert_close(out, plain)
    assert len(weights) == 3
    for w in weights:
        _rows_sum_to_one(w, 4)
