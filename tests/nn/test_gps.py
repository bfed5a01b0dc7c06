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


def test_local_layer_is_injected_and_copied_per_layer() -> None:
    from torch_geometric.nn import GCNConv

    conv = GCNConv(16, 16)
    encoder = GPSEncoder(16, num_layers=2, heads=4, local=conv)
    first, second = (layer.conv for layer in encoder.layers)
    assert isinstance(first, GCNConv) and first is not conv and second is not first
    assert not torch.equal(first.lin.weight, second.lin.weight)  # each layer's copy is drawn afresh
    tokens = GraphAdapter(in_channels=16, d_model=16, scope="graph")(GraphAdapter.example_batch(2))
    assert encoder(tokens.x, tokens.mask, tokens=tokens).shape == tokens.x.shape
    assert GPSEncoder(16, local=None).layers[0].conv is None


def test_global_attention_runs_under_the_adapters_mask() -> None:
    from attnmm.masks import SameGraph

    torch.manual_seed(0)
    encoder = GPSEncoder(16, num_layers=1, heads=2, local="none", max_distance=2).eval()
    batch = GraphAdapter.example_batch(3)
    adapter = GraphAdapter(in_channels=16, d_model=16, scope="graph").eval()
    graph_tokens = adapter(batch)
    assert isinstance(graph_tokens.mask, SameGraph)
    # no mask: every node attends its graph, as under the adapter's scope="graph" mask
    expected = encoder(graph_tokens.x, None, tokens=graph_tokens)
    torch.testing.assert_close(encoder(graph_tokens.x, graph_tokens.mask, tokens=graph_tokens), expected)
    adapter.scope = "edges"
    edge_tokens = adapter(batch)  # the same nodes, attending their in-edges only: another attention
    torch.testing.assert_close(edge_tokens.x, graph_tokens.x)
    assert not torch.allclose(encoder(edge_tokens.x, edge_tokens.mask, tokens=edge_tokens), expected)
    with pytest.raises(ValueError, match="GPSEncoder cannot read a sequence incrementally"):
        encoder(graph_tokens.x, graph_tokens.mask, tokens=graph_tokens, state=object())
