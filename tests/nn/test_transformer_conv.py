"""AttentionConv reproduces PyG's TransformerConv: outputs, attention weights and gradients."""

from __future__ import annotations

import warnings

import pytest
import torch
from _gat_compare import check_graph_reads, check_output_ignores_weights_flag

from attnmm.masks import Graph
from attnmm.masks.graph_helpers import self_loops, virtual_nodes
from attnmm.nn import AttentionConv

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch_geometric import EdgeIndex
    from torch_geometric.nn import TransformerConv
    from torch_geometric.utils import to_torch_csc_tensor

OPTIONS = [
    {},
    {"heads": 3},
    {"heads": 2, "concat": False},
    {"heads": 2, "beta": True},
    {"heads": 2, "beta": True, "concat": False},
    {"heads": 2, "root_weight": False},
    {"heads": 2, "bias": False},
    {"heads": 2, "edge_dim": 3},
    {"heads": 2, "edge_dim": 3, "beta": True, "concat": False},
]


def _pair(in_channels: int | tuple[int, int], out_channels: int, **kw: object) -> tuple[TransformerConv, AttentionConv]:
    torch.manual_seed(0)
    ref = TransformerConv(in_channels, out_channels, **kw).eval()
    ours = AttentionConv(in_channels, out_channels, **kw).eval()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _graph(num_src: int, num_dst: int, num_edges: int, duplicates: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.stack(
        [torch.randint(0, num_src, (num_edges,), generator=g), torch.randint(0, num_dst, (num_edges,), generator=g)]
    )
    if duplicates:
        edge_index = torch.cat([edge_index, edge_index[:, : num_edges // 3]], 1)
    return edge_index


def _assert_same(
    ref: TransformerConv, ours: AttentionConv, x: object, edge_index: object, edge_attr: torch.Tensor | None
) -> None:
    inputs = list(x) if isinstance(x, tuple) else [x]
    for t in inputs:
        t.requires_grad_(True)
    out_r, (_, alpha_r) = ref(x, edge_index, edge_attr, return_attention_weights=True)
    out_o, (ei_o, alpha_o) = ours(x, edge_index, edge_attr, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_r, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(alpha_o, alpha_r, atol=1e-6, rtol=1e-4)
    assert ei_o is edge_index
    grad = torch.randn_like(out_r)
    params_r = [p for _, p in ref.named_parameters()]
    params_o = [ours.get_parameter(n) for n, _ in ref.named_parameters()]
    g_r = torch.autograd.grad(out_r, inputs + params_r, grad, allow_unused=True)
    g_o = torch.autograd.grad(out_o, inputs + params_o, grad, allow_unused=True)
    for a, b in zip(g_o, g_r):
        if b is None:
            assert a is None or float(a.abs().max()) < 1e-6
        else:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
@pytest.mark.parametrize("duplicates", [False, True], ids=["simple", "repeated-edges"])
def test_matches_transformer_conv(kw: dict, duplicates: bool) -> None:
    ref, ours = _pair(8, 4, **kw)
    edge_index = _graph(9, 9, 30, duplicates, seed=1)
    edge_attr = torch.randn(edge_index.size(1), 3) if kw.get("edge_dim") else None
    _assert_same(ref, ours, torch.randn(9, 8), edge_index, edge_attr)


@pytest.mark.parametrize("kw", [{}, {"beta": True, "edge_dim": 2}, {"root_weight": False, "concat": False}])
def test_bipartite(kw: dict) -> None:
    ref, ours = _pair((8, 5), 4, heads=2, **kw)
    edge_index = _graph(7, 4, 20, duplicates=True, seed=2)
    edge_attr = torch.randn(edge_index.size(1), 2) if kw.get("edge_dim") else None
    _assert_same(ref, ours, (torch.randn(7, 8), torch.randn(4, 5)), edge_index, edge_attr)


def test_isolated_nodes_and_empty_graph() -> None:
    ref, ours = _pair(6, 3, heads=2)
    x = torch.randn(5, 6)
    edge_index = torch.tensor([[0, 1], [1, 1]])  # nodes 0, 2, 3, 4 receive nothing
    _assert_same(ref, ours, x, edge_index, None)
    empty = torch.zeros(2, 0, dtype=torch.long)
    out, (_, alpha) = ours(x, empty, return_attention_weights=True)
    torch.testing.assert_close(out, ref(x, empty))
    assert alpha.shape == (0, 2)


def test_input_formats_agree() -> None:
    ref, ours = _pair(8, 4, heads=2)
    x = torch.randn(6, 8)
    edge_index = torch.unique(_graph(6, 6, 15, duplicates=False, seed=3), dim=1)  # a sparse matrix merges repeats
    expected = ours(x, edge_index)
    adj_t = torch.sparse_coo_tensor(
        edge_index.flip(0), torch.ones(edge_index.size(1)), (6, 6)
    ).coalesce()  # (N_dst, N_src)
    for adj in (adj_t, adj_t.to_sparse_csr()):
        out, (returned, alpha) = ours(x, adj, return_attention_weights=True)
        torch.testing.assert_close(out, expected)
        out_r, (_, alpha_r) = ref(x, adj, return_attention_weights=True)
        torch.testing.assert_close(out, out_r, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(alpha, alpha_r, atol=1e-6, rtol=1e-4)
        assert returned is adj
    pyg = EdgeIndex(edge_index.contiguous(), sparse_size=(6, 6))
    torch.testing.assert_close(ours(x, pyg), expected)
    torch.testing.assert_close(ours(x, Graph(edge_index, 6)), expected)  # an attnmm mask as the adjacency


@pytest.mark.parametrize("kw", [{"beta": True, "edge_dim": 2}, {"concat": False, "edge_dim": 2}, {}])
def test_bipartite_sparse_adjacency(kw: dict) -> None:
    """A sparse adjacency (N_dst, N_src) of a bipartite graph, with edge features in its order of edges:
    the same as the edge_index, and as PyG, for COO and CSR matrices."""
    ref, ours = _pair((8, 5), 4, heads=2, **kw)
    x = (torch.randn(7, 8), torch.randn(4, 5))
    edge_index = torch.unique(_graph(7, 4, 20, duplicates=False, seed=6).flip(0), dim=1).flip(0)  # by target
    edge_attr = torch.randn(edge_index.size(1), 2) if kw.get("edge_dim") else None
    expected = ours(x, edge_index, edge_attr)
    coo = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)), (4, 7)).coalesce()
    csr = to_torch_csc_tensor(edge_index, size=(7, 4)).t()  # the transposed CSC matrix is CSR
    for adj in (coo, csr):  # both list the edges by target, as edge_index does
        out, (returned, alpha) = ours(x, adj, edge_attr, return_attention_weights=True)
        torch.testing.assert_close(out, expected)
        out_r, (_, alpha_r) = ref(x, adj, edge_attr, return_attention_weights=True)
        torch.testing.assert_close(out, out_r, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(alpha, alpha_r, atol=1e-6, rtol=1e-4)
        assert returned is adj
    with pytest.raises(ValueError, match=r"adjacency is \(N_src, N_dst\) = \(7, 4\) but the node features have \(7, 3"):
        ours((x[0], x[1][:3]), coo, edge_attr)


OPTIONS_WITHOUT_EDGE_FEATURES = [{}, {"beta": True}, {"beta": True, "concat": False}, {"root_weight": False}]


@pytest.mark.parametrize("kw", OPTIONS_WITHOUT_EDGE_FEATURES, ids=lambda kw: ",".join(kw) or "default")
def test_output_does_not_depend_on_return_attention_weights(kw: dict) -> None:
    check_output_ignores_weights_flag(lambda: AttentionConv(8, 16, heads=2, **kw), 8)


def test_output_does_not_depend_on_return_attention_weights_with_edge_features() -> None:
    check_output_ignores_weights_flag(lambda: AttentionConv(8, 16, heads=2, beta=True, edge_dim=3), 8, edge_dim=3)


def test_extra_mask_is_united_with_the_edges() -> None:
    _, ours = _pair(8, 4, heads=2)
    x = torch.randn(6, 8)
    edge_index = _graph(6, 6, 12, duplicates=False, seed=4)
    loops = torch.arange(6).repeat(2, 1)
    expected = ours(x, torch.cat([edge_index, loops], 1))
    out, (pairs, weights) = ours(x, edge_index, mask=self_loops(6), return_attention_weights=True)
    torch.testing.assert_close(out, expected)
    assert pairs.shape == (2, weights.size(0)) and weights.shape[1] == 2
    torch.testing.assert_close(weights.sum(0), torch.full((2,), 6.0))  # each node's weights sum to 1


def test_virtual_node_mask() -> None:
    _, ours = _pair(8, 4, heads=1)
    batch = torch.tensor([0, 0, 0, 1, 1])
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    x = torch.randn(5 + 2, 8)  # 5 nodes and one virtual node per graph
    out = ours(x, Graph(edge_index, 7), mask=virtual_nodes(5, batch))
    assert out.shape == (7, 4) and torch.isfinite(out).all()


def test_graph_read_once_and_never_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    check_graph_reads(lambda: AttentionConv(8, 4, heads=2), monkeypatch)


def test_dropout_in_training_only() -> None:
    conv = AttentionConv(8, 4, heads=2, dropout=0.5)
    x, edge_index = torch.randn(6, 8), _graph(6, 6, 20, False, seed=5)
    conv.eval()
    torch.testing.assert_close(conv(x, edge_index), conv(x, edge_index))
    conv.train()
    torch.manual_seed(0)
    a = conv(x, edge_index)
    torch.manual_seed(1)
    assert not torch.allclose(a, conv(x, edge_index))


def test_errors_name_expected_and_actual() -> None:
    conv = AttentionConv(8, 4, edge_dim=3)
    x, edge_index = torch.randn(5, 8), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"edge_attr of shape \(M, 3\) = \(2, 3\).*got None"):
        conv(x, edge_index)
    with pytest.raises(ValueError, match=r"edge_index must be an integer tensor of shape \(2, M\)"):
        AttentionConv(8, 4)(x, torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="out of range"):
        AttentionConv(8, 4)(x, torch.tensor([[0], [7]]))
    with pytest.raises(ValueError, match="needs target features"):
        AttentionConv(8, 4)((x, None), edge_index)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="in_channels must be an int"):
        AttentionConv("8", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        AttentionConv(8, 4, dropout=1.0)


def test_repr() -> None:
    assert repr(AttentionConv((8, 4), 16, heads=2)) == "AttentionConv((8, 4), 16, heads=2)"
