"""GPSLayer and GPSEncoder: global attention on the packed layout equals per-graph dense attention."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import GraphAdapter
from attnmm.masks import Graph
from attnmm.nn import GPSEncoder, GPSLayer


def test_packed_global_attention_equals_each_graph_alone() -> None:
    torch.manual_seed(0)
    layer = GPSLayer(16, conv=None, heads=4, norm="layer").eval()
    sizes = [3, 5, 2]
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    x = torch.randn(10, 16)
    empty = torch.zeros(2, 0, dtype=torch.long)
    out = layer(x, empty, batch)
    for g, part in enumerate(x.split(sizes)):
        alone = layer(part, empty, torch.zeros(part.size(0), dtype=torch.long))
        torch.testing.assert_close(out[batch == g], alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("local", ["gin", "attention", "none"])
def test_encoder_on_adapter_tokens(local: str) -> None:
    adapter = GraphAdapter(in_channels=16, d_model=32, pe="random_walk", pe_dim=4)
    encoder = GPSEncoder(32, num_layers=2, heads=4, local=local, max_distance=3)
    tokens = adapter(GraphAdapter.example_batch(3))
    h = encoder(tokens.x, tokens.mask, tokens=tokens)
    assert h.shape == tokens.x.shape and torch.isfinite(h).all()
    h.sum().backward()
    assert encoder.spd is not None and encoder.spd.table.weight.grad is not None  # the bias is trained


def test_encoder_with_a_graph_mask_only_and_errors() -> None:
    encoder = GPSEncoder(8, num_layers=1, heads=2).eval()
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)
    assert encoder(torch.randn(3, 8), g).shape == (3, 8)
    with pytest.raises(ValueError, match="GPSEncoder needs the edges"):
        encoder(torch.randn(3, 8), None)
    with pytest.raises(ValueError, match="local must be"):
        GPSEncoder(8, local="gcn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="norm must be"):
        GPSLayer(8, norm="group")  # type: ignore[arg-type]


def test_layer_inside_a_pyg_model_with_edge_features() -> None:
    from torch_geometric.nn import GINEConv

    conv = GINEConv(torch.nn.Linear(8, 8), edge_dim=3)
    layer = GPSLayer(8, conv, heads=2)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    out = layer(torch.randn(3, 8), edge_index, edge_attr=torch.randn(3, 3))
    assert out.shape == (3, 8)
