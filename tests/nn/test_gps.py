"""GPSEncoder on GPSConv layers: global attention on the packed layout equals per-graph dense attention."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import GraphAdapter
from attnmm.masks import Graph
from attnmm.nn import GPSConv, GPSEncoder


def test_packed_global_attention_equals_each_graph_alone() -> None:
    torch.manual_seed(0)
    layer = GPSConv(16, None, heads=4, norm="layer_norm", norm_kwargs={"mode": "node"}).eval()
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


def test_encoder_recompute_gives_the_same_values_and_gradients() -> None:
    adapter = GraphAdapter(in_channels=16, d_model=32, pe="random_walk", pe_dim=4)
    tokens = adapter(GraphAdapter.example_batch(3))
    x = tokens.x.detach()
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        encoder = GPSEncoder(32, num_layers=2, heads=4, local="gin", dropout=0.1, recompute=recompute)
        assert all(layer.recompute == recompute for layer in encoder.layers)
        torch.manual_seed(1)
        out = encoder(x, tokens.mask, tokens=tokens)
        grads.append((out, *torch.autograd.grad(out.square().sum(), list(encoder.parameters()))))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_encoder_with_a_graph_mask_only_and_errors() -> None:
    encoder = GPSEncoder(8, num_layers=1, heads=2).eval()
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)
    assert encoder(torch.randn(3, 8), g).shape == (3, 8)
    with pytest.raises(ValueError, match="GPSEncoder needs the edges"):
        encoder(torch.randn(3, 8), None)
    with pytest.raises(ValueError, match="local must be"):
        GPSEncoder(8, local="gcn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="norm must be"):
        GPSEncoder(8, norm="group")  # type: ignore[arg-type]


def test_layer_inside_a_pyg_model_with_edge_features() -> None:
    from torch_geometric.nn import GINEConv

    conv = GINEConv(torch.nn.Linear(8, 8), edge_dim=3)
    layer = GPSConv(8, conv, heads=2)
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


def _gine_reference(conv: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """GINE (Hu et al., 2020) by a loop over the edges: mlp((1 + eps) x_i + sum_{j -> i} relu(x_j + e_ji))."""
    agg = torch.zeros_like(x)
    for m, (j, i) in enumerate(edge_index.t().tolist()):
        agg[i] += torch.relu(x[j] + e[m])
    return conv.nn((1 + conv.eps) * x + agg)


def test_gine_reads_the_tokens_bond_embeddings_and_equals_a_reference() -> None:
    """local='gine': each layer's GINEConv gets the adapter's embedded edge features; with attention off
    the layer is Norm(X_L + MLP(X_L)), X_L = Norm(X + GINE(X, E)), checked against a loop over the edges."""
    from torch_geometric.data import Data

    torch.manual_seed(0)
    mol = Data(
        x=torch.tensor([[6, 0], [6, 1], [8, 0], [7, 1]]),
        edge_index=torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]]),
        edge_attr=torch.tensor([[0], [0], [1], [1], [2], [2]]),
    )
    adapter = GraphAdapter(2, 8, cardinalities=[10, 2], edge_cardinalities=[3], scope="graph").eval()
    tokens = adapter(mol)
    assert tokens.edge_attr is not None and tokens.edge_attr.shape == (6, 8)
    encoder = GPSEncoder(8, num_layers=2, heads=2, local="gine", attention=False, norm="layer").eval()
    x = tokens.x
    for layer in encoder.layers:
        assert layer.attn is None
        local = layer.norm1(x + _gine_reference(layer.conv, x, mol.edge_index, tokens.edge_attr))
        x = layer.norm3(local + layer.mlp(local))
    torch.testing.assert_close(encoder(tokens.x, tokens.mask, tokens=tokens), x)
    # with attention: the same GINE branch, plus the global one
    gps = GPSEncoder(8, num_layers=1, heads=2, local="gine", norm="layer").eval()
    layer = gps.layers[0]
    local = layer.norm1(tokens.x + _gine_reference(layer.conv, tokens.x, mol.edge_index, tokens.edge_attr))
    whole = tokens.x.unsqueeze(0)  # (1, N, D): one molecule, every atom attends every atom
    both = layer.norm2(tokens.x + layer.attn(whole, whole, whole, need_weights=False)[0][0]) + local
    torch.testing.assert_close(gps(tokens.x, tokens.mask, tokens=tokens), layer.norm3(both + layer.mlp(both)))


def test_message_passing_alone_and_its_errors() -> None:
    adapter = GraphAdapter(in_channels=16, d_model=16, scope="graph")
    tokens = adapter(GraphAdapter.example_batch(2))
    mpnn = GPSEncoder(16, num_layers=2, local="gin", attention=False)
    assert mpnn(tokens.x, tokens.mask, tokens=tokens).shape == tokens.x.shape
    full = GPSEncoder(16, num_layers=2, local="gin")
    assert sum(p.numel() for p in full.parameters()) > sum(p.numel() for p in mpnn.parameters())
    assert "heads=off" in repr(mpnn.layers[0])
    with pytest.raises(ValueError, match="give a local layer"):
        GPSEncoder(16, local="none", attention=False)
    with pytest.raises(ValueError, match="max_distance biases the global attention"):
        GPSEncoder(16, attention=False, max_distance=3)
    with pytest.raises(ValueError, match="needs a local conv, global attention or both"):
        GPSConv(16, None, attn_type=None)
    with pytest.raises(ValueError, match=r"local='gine' adds edge features of the model's width D = 16"):
        GPSEncoder(16, local="gine")(tokens.x, tokens.mask, tokens=tokens)  # example graphs have no edge_attr


def test_edge_features_reach_only_layers_that_read_them() -> None:
    """A local layer whose forward takes ``edge_attr`` third gets the tokens' edge features; GIN (no
    edge features) is called as before."""
    from torch_geometric.data import Data
    from torch_geometric.nn import GINEConv

    calls = []

    class Spy(GINEConv):
        def forward(self, x, edge_index, edge_attr=None, size=None):  # type: ignore[no-untyped-def, override]
            calls.append(edge_attr)
            return super().forward(x, edge_index, edge_attr, size)

    data = Data(x=torch.randn(3, 4), edge_index=torch.tensor([[0, 1], [1, 2]]), edge_attr=torch.randn(2, 5))
    tokens = GraphAdapter(in_channels=4, d_model=8, scope="graph")(data)  # float edge features passed on
    encoder = GPSEncoder(8, num_layers=2, heads=2, local=Spy(torch.nn.Linear(8, 8), edge_dim=5))
    encoder(tokens.x, tokens.mask, tokens=tokens)
    assert len(calls) == 2 and all(c is tokens.edge_attr for c in calls)
    gin = GPSEncoder(8, num_layers=1, heads=2, local="gin")
    assert gin(tokens.x, tokens.mask, tokens=tokens).shape == (3, 8)  # GINConv takes no edge_attr


def test_the_layers_share_one_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnmm.nn.gps as gps
    from attnmm.attention import AttentionPlan

    plans: list[AttentionPlan] = []

    class Recorded(AttentionPlan):
        def __init__(self) -> None:
            super().__init__()
            plans.append(self)

    monkeypatch.setattr(gps, "AttentionPlan", Recorded)
    # a mask that goes through dispatch (full attention within each graph has its own path, no dispatch)
    tokens = GraphAdapter(in_channels=16, d_model=16, scope="edges")(GraphAdapter.example_batch(3))
    encoder = GPSEncoder(16, num_layers=3, heads=2, local="gin")
    out = encoder(tokens.x, tokens.mask, tokens=tokens)
    assert len(plans) == 1 and (plans[0].made, plans[0].reused) == (1, 2)
    monkeypatch.undo()
    torch.testing.assert_close(out, encoder(tokens.x, tokens.mask, tokens=tokens))  # the same result


def _within_graphs_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Dense masked softmax over all N nodes, a node allowed the nodes of its own graph: (N, H, E)."""
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    scores = torch.einsum("nhe,mhe->hnm", q, k) * q.size(-1) ** -0.5  # (H, N, N)
    scores = scores.masked_fill(batch.view(1, -1, 1) != batch.view(1, 1, -1), float("-inf"))
    return torch.einsum("hnm,mhe->nhe", scores.softmax(-1), v)


@pytest.mark.parametrize("group_rows", [512, 8])  # (8: graphs in several groups, some larger than one)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("sizes", [[7], [1], [3, 0, 1, 9, 2], [40, 25], [3, 4, 2, 6, 1, 5]])
def test_graph_attention_equals_the_dense_reference(
    fused: bool, sizes: list[int], group_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnmm.nn._graph_attention as ga

    monkeypatch.setattr(ga, "_fused", lambda q, p: fused)
    monkeypatch.setattr(ga, "GROUP_ROWS", group_rows)
    torch.manual_seed(sum(sizes))
    N, H, E = sum(sizes), 2, 8
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
        x = torch.randn(N, H * E, dtype=dtype, requires_grad=True)
        weight = (torch.randn(3 * H * E, H * E, dtype=dtype) / (H * E) ** 0.5).requires_grad_()  # (3D, D), q ~ N(0, 1)
        bias = torch.randn(3 * H * E, dtype=dtype, requires_grad=True)
        out = ga.graph_attention(x, weight, bias, H, sizes)
        q, k, v = torch.nn.functional.linear(x, weight, bias).view(N, 3, H, E).unbind(1)  # (N, H, E) each
        ref = _within_graphs_reference(q, k, v, sizes)
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
        grad = torch.randn_like(out)
        got, want = torch.autograd.grad(out, (x, weight, bias), grad), torch.autograd.grad(ref, (x, weight, bias), grad)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    with pytest.raises(ValueError, match="sum to"):
        ga.graph_attention(x, weight, bias, H, [*sizes, 1])


def test_graphs_go_through_the_attention_in_groups_of_whole_graphs() -> None:
    from attnmm.nn._graph_attention import _groups

    assert _groups([3, 4, 2, 6, 1, 5], rows=8) == [(0, [3, 4]), (7, [2, 6]), (15, [1, 5])]
    assert _groups([9, 2, 12], rows=8) == [(0, [9]), (9, [2]), (11, [12])]  # a larger graph alone
    assert _groups([], rows=8) == [] and _groups([5, 5]) == [(0, [5, 5])]


def test_the_mask_says_when_it_is_full_attention_within_each_graph() -> None:
    """The graphs' own path is taken for a mask whose allowed sets are exactly the nodes' graphs, as the
    mask reports it, and for no other (compositions with other masks, edges)."""
    from attnmm.masks import Full, SameGraph
    from attnmm.masks.graph_helpers import self_loops
    from attnmm.nn._graph_attention import within_graph_sizes

    batch = torch.tensor([0, 0, 0, 2, 2, 3])  # graph 1 has no node
    assert within_graph_sizes(SameGraph(batch), 6) == [3, 2, 1]
    edges = Graph(torch.tensor([[0, 1], [1, 2]]), 6)
    for other in (SameGraph(batch) & edges, SameGraph(batch) | self_loops(6), edges, SameGraph(batch) & Full()):
        assert within_graph_sizes(other, 6) is None


def test_layer_within_graphs_equals_the_dispatched_path() -> None:
    """The layer's own path for full attention within each graph gives the outputs and gradients of the
    general path (the same allowed pairs as a Graph mask, through attnmm's dispatch)."""
    from torch_geometric.nn import GINEConv

    from attnmm.masks import SameGraph

    torch.manual_seed(0)
    sizes = [5, 1, 12, 3]  # a graph of one node among them
    batch = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    edge_index = torch.tensor([[0, 1, 6, 7, 9, 18], [1, 2, 7, 8, 6, 19]])  # directed edges
    x, e = torch.randn(21, 16), torch.randn(6, 16)
    layer = GPSConv(16, GINEConv(torch.nn.Linear(16, 16)), heads=4).train()
    same = SameGraph(batch)
    pairs = same.pairs(21, 21)
    as_graph = Graph(torch.stack([pairs.col, pairs.row]), 21)  # the same allowed set, dispatched
    outs, grads = [], []
    for mask in (None, same, as_graph):
        layer.zero_grad()
        out = layer(x, edge_index, batch, mask=mask, edge_attr=e)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append({n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None})
    for out, grad in zip(outs[:2], grads[:2]):
        torch.testing.assert_close(out, outs[2], atol=1e-5, rtol=1e-4)
        assert grad.keys() == grads[2].keys()
        for name in grad:  # (biases before a batch norm have gradient 0 up to rounding: an absolute tolerance)
            torch.testing.assert_close(grad[name], grads[2][name], atol=1e-4, rtol=1e-3)
