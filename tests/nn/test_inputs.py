"""The graph layers refuse node features that do not fit, at the top of forward, naming in_channels
and the expected and the actual shape (never "edge_index out of range" or a matmul error)."""

from __future__ import annotations

import pytest
import torch

from attnmm.nn import AttentionConv, GATConv, GATv2Conv

LAYERS = {"GATConv": GATConv, "GATv2Conv": GATv2Conv, "AttentionConv": AttentionConv}
edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])


@pytest.mark.parametrize("name", LAYERS)
def test_batch_of_sequences_is_refused_as_such(name: str) -> None:
    conv = LAYERS[name](16, 8, heads=2)
    with pytest.raises(
        ValueError,
        match=rf"{name}: x must have shape \(N, 16\), got a 3-D tensor of shape \(2, 10, 16\); graph layers take "
        r"PyG's packed layout",
    ):
        conv(torch.randn(2, 10, 16), torch.randint(0, 10, (2, 30)))


@pytest.mark.parametrize("name", LAYERS)
def test_wrong_width_names_in_channels(name: str) -> None:
    conv = LAYERS[name](16, 8, heads=2)
    with pytest.raises(
        ValueError,
        match=rf"{name} was built with in_channels=16, so x must have 16 features in its last dim, shape \(N, 16\), "
        r"got shape \(5, 12\); build it with in_channels=12",
    ):
        conv(torch.randn(5, 12), edge_index)
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor of shape \(N, 16\), got dtype torch.int64"):
        conv(torch.ones(5, 16, dtype=torch.long), edge_index)
    assert conv(torch.randn(5, 16), edge_index).shape == (5, 16)  # what fits still runs


@pytest.mark.parametrize("name", LAYERS)
def test_bipartite_names_the_side(name: str) -> None:
    conv = LAYERS[name]((16, 6), 8, heads=2)
    with pytest.raises(ValueError, match=r"in_channels\[1\]=6, so x\[1\] must have 6 features .* got shape \(5, 16\)"):
        conv((torch.randn(5, 16), torch.randn(5, 16)), edge_index)
    with pytest.raises(ValueError, match=r"built with in_channels\[0\]=16, so x\[0\] must have 16 features"):
        conv((torch.randn(5, 6), torch.randn(5, 6)), edge_index)
    assert conv((torch.randn(5, 16), torch.randn(5, 6)), edge_index).shape == (5, 16)


@pytest.mark.parametrize("name", ["GraphAttentionEncoder", "PropagationEncoder", "EgoNeighbourEncoder"])
def test_graph_encoders_name_in_channels(name: str) -> None:
    import attnmm.nn
    from attnmm.masks import Graph

    encoder = getattr(attnmm.nn, name)(16, 8, 4)
    mask = Graph(edge_index, num_nodes=5)
    with pytest.raises(ValueError, match=rf"{name} was built with in_channels=16, so x must have 16 features .* "
                       r"got shape \(5, 12\)"):  # fmt: skip
        encoder(torch.randn(5, 12), mask)
    with pytest.raises(ValueError, match=rf"{name}: x must have shape \(N, 16\), got a 3-D tensor"):
        encoder(torch.randn(2, 5, 16), mask)
    assert encoder(torch.randn(5, 16), mask).shape == (5, 4)


@pytest.mark.parametrize("name", ["PoolingClassifier", "TokenClassifier"])
def test_heads_name_d_model(name: str) -> None:
    import attnmm.nn
    from attnmm.adapters import Tokens

    head = getattr(attnmm.nn, name)(16, 3)
    tokens = Tokens(torch.randn(2, 5, 16), None, lengths=torch.tensor([5, 3]))
    with pytest.raises(ValueError, match=rf"{name} was built with d_model=16, so h must have 16 features .* "
                       r"got shape \(2, 5, 12\); build it with d_model=12"):  # fmt: skip
        head(torch.randn(2, 5, 12), tokens)
    assert head(torch.randn(2, 5, 16), tokens).shape[-1] == 3
