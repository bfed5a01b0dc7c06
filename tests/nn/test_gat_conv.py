"""GATConv reproduces PyG's GATConv: outputs, attention weights and gradients, for every option and
input form; an extra mask against a dense reference."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from _gat_compare import (
    assert_same,
    check_dropout_in_training_only,
    check_extra_mask,
    check_graph_reads,
    check_output_ignores_weights_flag,
    dense_reference,
    pair,
    random_edges,
)
from torch import Tensor

from attnmm import attend
from attnmm.masks import Graph
from attnmm.nn import GATConv

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch_geometric import EdgeIndex
    from torch_geometric.nn import GATConv as PyGGATConv
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor

OPTIONS = [
    {},
    {"heads": 3},
    {"heads": 3, "concat": False},
    {"heads": 2, "add_self_loops": False},
    {"heads": 2, "negative_slope": 0.1, "bias": False},
    {"heads": 2, "residual": True},
    {"heads": 2, "residual": True, "concat": False},
    {"heads": 2, "edge_dim": 3},
    {"heads": 2, "edge_dim": 3, "fill_value": 0.5, "concat": False},
    {"heads": 2, "edge_dim": 3, "fill_value": "add", "residual": True},
    {"heads": 2, "edge_dim": 3, "add_self_loops": False},
]


def _ids(kw: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


@pytest.mark.parametrize("kw", OPTIONS, ids=_ids)
@pytest.mark.parametrize("repeats", [False, True], ids=["simple", "repeated-edges"])
def test_matches_pyg(kw: dict, repeats: bool) -> None:
    ref, ours = pair(PyGGATConv, GATConv, 8, 4, **kw)
    edge_index = random_edges(9, 9, 30, seed=1, repeats=repeats)  # directed, with some self loops
    edge_attr = torch.randn(edge_index.size(1), 3) if kw.get("edge_dim") else None
    assert_same(ref, ours, torch.randn(9, 8), edge_index, edge_attr)


def test_one_dimensional_edge_attr_and_tensor_fill_value() -> None:
    ref, ours = pair(PyGGATConv, GATConv, 8, 4, heads=2, edge_dim=1, fill_value=torch.tensor([2.0]))
    edge_index = random_edges(7, 7, 20, seed=2)
    assert_same(ref, ours, torch.randn(7, 8), edge_index, torch.randn(edge_index.size(1)))


@pytest.mark.parametrize("kw", [{}, {"edge_dim": 2, "residual": True}, {"add_self_loops": False, "concat": False}])
def test_bipartite(kw: dict) -> None:
    ref, ours = pair(PyGGATConv, GATConv, (8, 5), 4, heads=2, **kw)
    edge_index = random_edges(7, 4, 20, seed=3)
    edge_attr = torch.randn(edge_index.size(1), 2) if kw.get("edge_dim") else None
    x = (torch.randn(7, 8), torch.randn(4, 5))
    assert_same(ref, ours, x, edge_index, edge_attr)
    assert_same(ref, ours, x, edge_index, edge_attr, size=(7, 4))


def test_shared_projection_on_a_pair_and_missing_targets_with_size() -> None:
    ref, ours = pair(PyGGATConv, GATConv, 8, 4, heads=2)
    edge_index = random_edges(6, 6, 15, seed=4)
    assert_same(ref, ours, (torch.randn(6, 8), torch.randn(6, 8)), edge_index)
    small = edge_index[:, edge_index[1] < 3]
    out, _ = assert_same(ref, ours, (torch.randn(6, 8), None), small, size=(6, 3))  # sources only
    assert out.shape == (3, 8)


@pytest.mark.parametrize("residual", [False, True])
def test_missing_targets_sized_by_size_or_by_the_adjacency(residual: bool) -> None:
    """Sources only, (x_src, None), on a bipartite layer: the targets number size[1], or as many as the
    rows of a sparse adjacency (N_dst, N_src) or the sparse size of an EdgeIndex; no residual (there
    are no target features), one self loop per target."""
    ref, ours = pair(PyGGATConv, GATConv, (8, 5), 4, heads=2, residual=residual)
    edge_index = torch.unique(random_edges(7, 4, 20, seed=10, repeats=False), dim=1)  # (2, M)
    x_src = torch.randn(7, 8)
    expected, _ = assert_same(ref, ours, (x_src, None), edge_index, size=(7, 4))
    assert expected.shape == (4, 8)
    coo = to_torch_coo_tensor(edge_index, size=(7, 4)).t()  # (N_dst, N_src) = (4, 7)
    csr = to_torch_csc_tensor(edge_index, size=(7, 4)).t()  # the transposed CSC matrix is CSR
    for adj in (coo, csr):
        out, _ = assert_same(ref, ours, (x_src, None), adj)
        torch.testing.assert_close(out, expected)
    # PyG's own layer adds self loops for all 7 sources here (then has 7 targets): compared with size=
    torch.testing.assert_close(ours((x_src, None), EdgeIndex(edge_index.contiguous(), sparse_size=(7, 4))), expected)


def test_sizes_given_by_an_adjacency_must_agree() -> None:
    conv = GATConv((8, 5), 4)
    adj = to_torch_coo_tensor(torch.tensor([[0, 6], [1, 3]]), size=(7, 4)).t()  # (N_dst, N_src) = (4, 7)
    with pytest.raises(ValueError, match=r"size=\(7, 3\) does not match the adjacency.*\(7, 4\)"):
        conv((torch.randn(7, 8), None), adj, size=(7, 3))
    with pytest.raises(ValueError, match=r"adjacency is \(N_src, N_dst\) = \(7, 4\) but the node features have \(7, 5"):
        conv((torch.randn(7, 8), torch.randn(5, 5)), adj)


@pytest.mark.parametrize("kw", [{}, {"heads": 2, "concat": False, "residual": True}, {"add_self_loops": False}])
def test_output_does_not_depend_on_return_attention_weights(kw: dict) -> None:
    check_output_ignores_weights_flag(lambda: GATConv(8, 16, **kw), 8)


def test_output_does_not_depend_on_return_attention_weights_with_edge_features() -> None:
    check_output_ignores_weights_flag(lambda: GATConv(8, 16, heads=2, edge_dim=3), 8, edge_dim=3)


def test_isolated_nodes_get_the_bias_and_zero_gradient() -> None:
    ref, ours = pair(PyGGATConv, GATConv, 6, 3, heads=2, add_self_loops=False)
    with torch.no_grad():
        ours.bias.normal_()
        ref.bias.copy_(ours.bias)
    x = torch.randn(5, 6, requires_grad=True)
    edge_index = torch.tensor([[0, 1, 3], [1, 1, 2]])  # 0, 3 and 4 receive nothing; 4 sends nothing
    out, _ = assert_same(ref, ours, x, edge_index)
    for i in (0, 3, 4):
        torch.testing.assert_close(out[i], ours.bias)
    (grad,) = torch.autograd.grad(ours(x, edge_index)[[0, 3, 4]].sum(), x)
    assert torch.isfinite(grad).all() and float(grad[4].abs().max()) == 0.0
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert_same(ref, ours, torch.randn(5, 6), empty)
    out, (_, alpha) = ours(torch.randn(5, 6), empty, return_attention_weights=True)
    assert alpha.shape == (0, 2) and torch.equal(out, ours.bias.expand(5, -1))


@pytest.mark.parametrize("loops", [True, False])
def test_input_formats_agree(loops: bool) -> None:
    ref, ours = pair(PyGGATConv, GATConv, 8, 4, heads=2, add_self_loops=loops)
    x = torch.randn(6, 8)
    edge_index = torch.unique(random_edges(6, 6, 15, seed=5, repeats=False), dim=1)  # a sparse matrix merges repeats
    expected = ours(x, edge_index)
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)), (6, 6)).coalesce()
    for adj in (adj_t, adj_t.to_sparse_csr()):  # (N_dst, N_src)
        out, _ = assert_same(ref, ours, x, adj)
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ours(x, EdgeIndex(edge_index.contiguous(), sparse_size=(6, 6))), expected)
    if not loops:
        out, (returned, _) = ours(x, edge_index, return_attention_weights=True)
        assert returned is edge_index  # returned as given, as PyG does without self loops
    torch.testing.assert_close(ours(x, Graph(edge_index, 6)), expected)  # an attnmm mask as the adjacency


def test_return_attention_weights_follows_pyg() -> None:
    _, ours = pair(PyGGATConv, GATConv, 8, 4)
    x, edge_index = torch.randn(5, 8), random_edges(5, 5, 10, seed=6)
    assert isinstance(ours(x, edge_index, return_attention_weights=False), Tensor)  # only a truthy flag
    _, (returned, alpha) = ours(x, edge_index, return_attention_weights=True)
    torch.testing.assert_close(torch.zeros(5).index_add(0, returned[1], alpha[:, 0]), torch.ones(5))


def _dense_scores(conv: GATConv, x: Tensor) -> tuple[Tensor, Tensor]:
    """GAT scores of every pair (N, N, H) and the values (N, H, C), from the formula."""
    H, C = conv.heads, conv.out_channels
    h = conv.lin(x).view(-1, H, C)
    a_src, a_dst = (h * conv.att_src).sum(-1), (h * conv.att_dst).sum(-1)
    return F.leaky_relu(a_dst.unsqueeze(1) + a_src.unsqueeze(0), conv.negative_slope), h


@pytest.mark.parametrize("loops", [True, False])
def test_extra_mask_against_dense_reference(loops: bool) -> None:
    check_extra_mask(GATConv(6, 4, heads=2, add_self_loops=loops).eval(), _dense_scores, 8, loops)


def test_dropout_acts_in_training_only() -> None:
    check_dropout_in_training_only(*pair(PyGGATConv, GATConv, 8, 4, heads=2, dropout=0.5))


def test_graph_read_once_and_never_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    check_graph_reads(lambda: GATConv(8, 4, heads=2), monkeypatch)


def test_errors_name_expected_and_actual() -> None:
    x, edge_index = torch.randn(5, 8), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"edge_attr of shape \(M, 3\) = \(2, 3\).*got \(4, 3\)"):
        GATConv(8, 4, edge_dim=3, add_self_loops=False)(x, edge_index, torch.randn(4, 3))
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(2), (5, 5))
    with pytest.raises(ValueError, match=r"needs edge_index as a \(2, M\) tensor"):
        GATConv(8, 4, edge_dim=3)(x, adj, torch.randn(2, 3))
    with pytest.raises(ValueError, match="a Mask adjacency has none"):
        GATConv(8, 4, edge_dim=3)(x, Graph(edge_index, 5), torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"size=\(5, 4\) does not match"):
        GATConv(8, 4)(x, edge_index, size=(5, 4))
    with pytest.raises(ValueError, match="out of range"):
        GATConv(8, 4)(x, torch.tensor([[0], [7]]))
    with pytest.raises(TypeError, match="mask must be an attnmm Mask"):
        GATConv(8, 4)(x, edge_index, mask=edge_index)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="in_channels must be an int"):
        GATConv("8", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        GATConv(8, 4, dropout=1.0)


def test_repr() -> None:
    assert repr(GATConv((8, 4), 16, heads=2)) == "GATConv((8, 4), 16, heads=2)"


@pytest.mark.parametrize("backend", ["sparse", "reference"])
def test_zero_width_queries_and_keys_score_by_the_bias_alone(backend: str) -> None:
    """The layers' use of the core: q, k of head dim E = 0 make q_i . k_j = 0 and scale 1, so the
    softmax runs over the per-pair bias; values and gradients as a dense softmax of the bias."""
    n, H = 6, 2
    edge_index = torch.unique(random_edges(n, n, 14, seed=9, repeats=False), dim=1)
    mask = Graph(edge_index, n)
    pairs = mask.pairs(n, n)
    bias = torch.randn(pairs.nnz, H, requires_grad=True)
    v = torch.randn(n, H, 3, requires_grad=True)
    out = attend(v.new_zeros(n, H, 0), v.new_zeros(n, H, 0), v, mask, bias=bias, backend=backend)
    scores = torch.full((n, n, H), float("-inf")).index_put((pairs.row, pairs.col), bias)
    expected = dense_reference(scores, mask.dense(n, n), v).view(n, H, 3)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (bias, v), g), torch.autograd.grad(expected, (bias, v), g)):
        torch.testing.assert_close(a, b)
