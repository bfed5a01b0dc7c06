"""GATv2Conv reproduces PyG's GATv2Conv: outputs, attention weights and gradients, for every option and
input form, across the blocks of its pair-score kernel; an extra mask against a dense reference."""

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
    pair,
    random_edges,
)
from torch import Tensor

from attnmm.masks import Graph
from attnmm.nn import GATv2Conv, gatv2_conv

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch_geometric.nn import GATv2Conv as PyGGATv2Conv
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor

OPTIONS = [
    {},
    {"heads": 3},
    {"heads": 3, "concat": False},
    {"heads": 2, "share_weights": True},
    {"heads": 2, "add_self_loops": False},
    {"heads": 2, "negative_slope": 0.1, "bias": False},
    {"heads": 2, "residual": True},
    {"heads": 2, "residual": True, "concat": False},
    {"heads": 2, "edge_dim": 3},
    {"heads": 2, "edge_dim": 3, "fill_value": 0.5, "concat": False, "share_weights": True},
    {"heads": 2, "edge_dim": 3, "fill_value": "add", "residual": True},
    {"heads": 2, "edge_dim": 3, "add_self_loops": False},
]


def _ids(kw: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


@pytest.mark.parametrize("kw", OPTIONS, ids=_ids)
@pytest.mark.parametrize("repeats", [False, True], ids=["simple", "repeated-edges"])
def test_matches_pyg(kw: dict, repeats: bool) -> None:
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, 8, 4, **kw)
    edge_index = random_edges(9, 9, 30, seed=1, repeats=repeats)  # directed, with some self loops
    edge_attr = torch.randn(edge_index.size(1), 3) if kw.get("edge_dim") else None
    assert_same(ref, ours, torch.randn(9, 8), edge_index, edge_attr)


@pytest.mark.parametrize("kw", [{}, {"edge_dim": 2}], ids=_ids)
def test_pair_scores_across_blocks(kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gatv2_conv, "CHUNK_FLOATS", 5 * 2 * 4)  # blocks of 5 pairs, the last one short
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, 8, 4, heads=2, **kw)
    edge_index = random_edges(9, 9, 31, seed=2)
    edge_attr = torch.randn(edge_index.size(1), 2) if kw else None
    assert_same(ref, ours, torch.randn(9, 8), edge_index, edge_attr)


def test_one_dimensional_edge_attr_and_tensor_fill_value() -> None:
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, 8, 4, heads=2, edge_dim=1, fill_value=torch.tensor([2.0]))
    edge_index = random_edges(7, 7, 20, seed=3)
    assert_same(ref, ours, torch.randn(7, 8), edge_index, torch.randn(edge_index.size(1)))


@pytest.mark.parametrize("kw", [{}, {"edge_dim": 2, "residual": True}, {"add_self_loops": False, "concat": False}])
def test_bipartite(kw: dict) -> None:
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, (8, 5), 4, heads=2, **kw)
    edge_index = random_edges(7, 4, 20, seed=4)
    edge_attr = torch.randn(edge_index.size(1), 2) if kw.get("edge_dim") else None
    x = (torch.randn(7, 8), torch.randn(4, 5))
    out, _ = assert_same(ref, ours, x, edge_index, edge_attr)
    torch.testing.assert_close(ours(x, edge_index, edge_attr, size=(7, 4)), out)  # size: PyG's has none


@pytest.mark.parametrize("in_channels", [8, (8, 5)], ids=["one-width", "two-widths"])
def test_bipartite_sparse_adjacency(in_channels: int | tuple[int, int]) -> None:
    """A sparse adjacency (N_dst, N_src) of a bipartite graph gives the sizes: same as its edge_index,
    and as PyG, for COO and CSR matrices."""
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, in_channels, 4, heads=2)
    edge_index = torch.unique(random_edges(7, 4, 20, seed=11, repeats=False), dim=1)  # (2, M)
    x = (torch.randn(7, 8), torch.randn(4, 5 if isinstance(in_channels, tuple) else 8))
    expected, _ = assert_same(ref, ours, x, edge_index)
    coo = to_torch_coo_tensor(edge_index, size=(7, 4)).t()  # (N_dst, N_src) = (4, 7)
    csr = to_torch_csc_tensor(edge_index, size=(7, 4)).t()  # the transposed CSC matrix is CSR
    for adj in (coo, csr):
        out, _ = assert_same(ref, ours, x, adj)
        torch.testing.assert_close(out, expected)
    with pytest.raises(ValueError, match=r"adjacency is \(N_src, N_dst\) = \(7, 4\) but the node features have \(7, 3"):
        ours((x[0], x[1][:3]), coo)


@pytest.mark.parametrize("kw", [{}, {"heads": 2, "concat": False, "share_weights": True}, {"add_self_loops": False}])
def test_output_does_not_depend_on_return_attention_weights(kw: dict) -> None:
    check_output_ignores_weights_flag(lambda: GATv2Conv(8, 16, **kw), 8)


def test_output_does_not_depend_on_return_attention_weights_with_edge_features() -> None:
    check_output_ignores_weights_flag(lambda: GATv2Conv(8, 16, heads=2, edge_dim=3, residual=True), 8, edge_dim=3)


def test_isolated_nodes_get_the_bias_and_zero_gradient() -> None:
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, 6, 3, heads=2, add_self_loops=False)
    with torch.no_grad():
        ours.bias.normal_()
        ref.bias.copy_(ours.bias)
    x = torch.randn(5, 6, requires_grad=True)
    edge_index = torch.tensor([[0, 1, 3], [1, 1, 2]])  # 0, 3 and 4 receive nothing; 4 sends nothing
    out, _ = assert_same(ref, ours, x, edge_index)
    for i in (0, 3, 4):
        torch.testing.assert_close(out[i], ours.bias)
    (grad,) = torch.autograd.grad(ours(x, edge_index)[[0, 3, 4]].sum(), x)
    assert torch.isfinite(grad).all() and float(grad.abs().max()) == 0.0
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert_same(ref, ours, torch.randn(5, 6), empty)
    out, (_, alpha) = ours(torch.randn(5, 6), empty, return_attention_weights=True)
    assert alpha.shape == (0, 2) and torch.equal(out, ours.bias.expand(5, -1))


@pytest.mark.parametrize("loops", [True, False])
def test_input_formats_agree(loops: bool) -> None:
    ref, ours = pair(PyGGATv2Conv, GATv2Conv, 8, 4, heads=2, add_self_loops=loops)
    x = torch.randn(6, 8)
    edge_index = torch.unique(random_edges(6, 6, 15, seed=5, repeats=False), dim=1)  # a sparse matrix merges repeats
    expected = ours(x, edge_index)
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)), (6, 6)).coalesce()
    for adj in (adj_t, adj_t.to_sparse_csr()):  # (N_dst, N_src)
        out, _ = assert_same(ref, ours, x, adj)
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ours(x, Graph(edge_index, 6)), expected)  # an attnmm mask as the adjacency


def test_return_attention_weights_follows_pyg() -> None:
    _, ours = pair(PyGGATv2Conv, GATv2Conv, 8, 4)
    x, edge_index = torch.randn(5, 8), random_edges(5, 5, 10, seed=6)
    assert isinstance(ours(x, edge_index, None, False), Tensor)  # only a truthy flag returns weights
    _, (returned, alpha) = ours(x, edge_index, return_attention_weights=True)
    torch.testing.assert_close(torch.zeros(5).index_add(0, returned[1], alpha[:, 0]), torch.ones(5))


def _dense_scores(conv: GATv2Conv, x: Tensor) -> tuple[Tensor, Tensor]:
    """GATv2 scores of every pair (N, N, H) and the values (N, H, C), from the formula."""
    H, C = conv.heads, conv.out_channels
    x_l, x_r = conv.lin_l(x).view(-1, H, C), conv.lin_r(x).view(-1, H, C)
    z = F.leaky_relu(x_r.unsqueeze(1) + x_l.unsqueeze(0), conv.negative_slope)  # (N_dst, N_src, H, C)
    return (z * conv.att).sum(-1), x_l


@pytest.mark.parametrize("loops", [True, False])
def test_extra_mask_against_dense_reference(loops: bool) -> None:
    check_extra_mask(GATv2Conv(6, 4, heads=2, add_self_loops=loops).eval(), _dense_scores, 8, loops)


def test_dropout_acts_in_training_only() -> None:
    check_dropout_in_training_only(*pair(PyGGATv2Conv, GATv2Conv, 8, 4, heads=2, dropout=0.5))


def test_graph_read_once_and_never_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    check_graph_reads(lambda: GATv2Conv(8, 4, heads=2), monkeypatch)


def test_errors_name_expected_and_actual() -> None:
    x, edge_index = torch.randn(5, 8), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="build it with edge_dim=3"):
        GATv2Conv(8, 4)(x, edge_index, torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"edge_attr of shape \(M, 3\) = \(2, 3\).*got \(2, 4\)"):
        GATv2Conv(8, 4, edge_dim=3)(x, edge_index, torch.randn(2, 4))
    with pytest.raises(ValueError, match="needs target features"):
        GATv2Conv(8, 4)((x, None), edge_index)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"size=\(5, 4\) does not match"):
        GATv2Conv(8, 4)(x, edge_index, size=(5, 4))
    with pytest.raises(ValueError, match="share_weights=True needs equal source and target widths"):
        GATv2Conv((8, 5), 4, share_weights=True)


def test_repr() -> None:
    assert repr(GATv2Conv((8, 4), 16, heads=2)) == "GATv2Conv((8, 4), 16, heads=2)"
