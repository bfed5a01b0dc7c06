"""GPSConv: PyG's GPSConv test cases on ours, PyG's values and gradients, and masks against a dense reference."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.typing
from torch_geometric.nn import GINEConv, SAGEConv
from torch_geometric.nn import GPSConv as PyGGPSConv
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import to_torch_csc_tensor

from attnmm.masks import Graph, SameGraph
from attnmm.masks.graph_helpers import expander, k_hop, self_loops, virtual_nodes
from attnmm.nn import GPSConv


# the cases of PyG's test/nn/conv/test_gps_conv.py, on attnmm's GPSConv
@pytest.mark.parametrize("attn_type", ["multihead", "performer"])
@pytest.mark.parametrize("norm", [None, "batch_norm", "layer_norm"])
def test_pyg_cases(norm: str | None, attn_type: str) -> None:
    x = torch.randn(4, 16)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    batch = torch.tensor([0, 0, 1, 1])
    adj = to_torch_csc_tensor(edge_index, size=(4, 4))
    conv = GPSConv(16, conv=SAGEConv(16, 16), heads=4, norm=norm, attn_type=attn_type)
    conv.reset_parameters()
    assert str(conv) == f"GPSConv(16, conv=SAGEConv(16, 16, aggr=mean), heads=4, attn_type={attn_type})"
    out = conv(x, edge_index)
    assert out.size() == (4, 16)
    assert torch.allclose(conv(x, adj.t()), out, atol=1e-6)
    if torch_geometric.typing.WITH_TORCH_SPARSE:
        sparse = SparseTensor.from_edge_index(edge_index, sparse_sizes=(4, 4))
        assert torch.allclose(conv(x, sparse.t()), out, atol=1e-6)
    out = conv(x, edge_index, batch)
    assert out.size() == (4, 16)
    assert torch.allclose(conv(x, adj.t(), batch), out, atol=1e-6)
    if torch_geometric.typing.WITH_TORCH_SPARSE:
        assert torch.allclose(conv(x, sparse.t(), batch), out, atol=1e-6)


def test_attention_alone_in_eval_is_finite_and_never_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    # PyG's second case: attention only, eval mode; ours never pads, so the key-padding path is never taken
    calls: list[bool] = []
    merge = torch.nn.MultiheadAttention.merge_masks

    def spy(self, attn_mask, key_padding_mask, query):  # type: ignore[no-untyped-def]
        calls.append(key_padding_mask is not None)
        return merge(self, attn_mask, key_padding_mask, query)

    monkeypatch.setattr(torch.nn.MultiheadAttention, "merge_masks", spy)
    x = torch.randn(6, 16)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    batch = torch.tensor([0, 0, 1, 1, 1, 1])
    conv = GPSConv(16, conv=None, heads=2).eval()
    with torch.no_grad():
        out = conv(x, edge_index, batch)
    assert out.size() == (6, 16) and out.isfinite().all()
    assert calls == []


def _batch(sizes: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random directed graphs of ``sizes`` nodes: x (N, 16), edge_index (2, M), edge_attr (M, 16), batch (N,)."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    N = batch.numel()
    edges = torch.randint(0, N, (2, 3 * N), generator=g)
    edges = edges[:, (batch[edges[0]] == batch[edges[1]]) & (edges[0] != edges[1])]
    return torch.randn(N, 16, generator=g), edges, torch.randn(edges.size(1), 16, generator=g), batch


@pytest.mark.parametrize("attn_type", ["multihead", "performer"])
@pytest.mark.parametrize("sizes", [[9], [1, 6], [5, 1, 17, 3]])
@pytest.mark.parametrize("train", [True, False])
def test_equals_pygs_values_and_gradients(attn_type: str, sizes: list[int], train: bool) -> None:
    torch.manual_seed(len(sizes))
    x, edge_index, edge_attr, batch = _batch(sizes)
    theirs = PyGGPSConv(16, GINEConv(torch.nn.Linear(16, 16)), heads=4, attn_type=attn_type).train(train)
    ours = GPSConv(16, GINEConv(torch.nn.Linear(16, 16)), heads=4, attn_type=attn_type).train(train)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = theirs(x1, edge_index, batch, edge_attr=edge_attr)
    got = ours(x2, edge_index, batch, edge_attr=edge_attr)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(theirs.named_parameters(), ours.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


def _dense_attention(conv: GPSConv, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The attention branch by a dense masked softmax over all nodes (N, D); a row with no key gives 0."""
    attn = conv.attn
    N, H, D = x.size(0), attn.num_heads, attn.embed_dim
    q, k, v = torch.nn.functional.linear(x, attn.in_proj_weight, attn.in_proj_bias).view(N, 3, H, D // H).unbind(1)
    scores = torch.einsum("nhe,mhe->hnm", q, k) * (D // H) ** -0.5  # (H, N, N)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    out = torch.einsum("hnm,mhe->nhe", weights, v).reshape(N, D)
    return attn.out_proj(out)


def _masks(edge_index: torch.Tensor, batch: torch.Tensor) -> dict[str, tuple[object, int]]:
    N, G = batch.numel(), int(batch.max()) + 1
    g = torch.Generator().manual_seed(1)
    return {
        "exphormer": (Graph(edge_index, N) | expander(N, 2, batch, generator=g) | self_loops(N), N),
        "k_hop": (k_hop(edge_index, N, 2) | self_loops(N), N),
        "same_graph_and_edges": (SameGraph(batch) & (Graph(edge_index, N) | self_loops(N)), N),
        "same_graph": (SameGraph(batch), N),
        "virtual_node": (Graph(edge_index, N + G) | virtual_nodes(N, batch), N + G),
    }


@pytest.mark.parametrize("name", ["exphormer", "k_hop", "same_graph_and_edges", "same_graph", "virtual_node"])
def test_masks_equal_the_dense_reference(name: str) -> None:
    torch.manual_seed(0)
    x, edge_index, _, batch = _batch([6, 1, 11, 4], seed=3)
    mask, n = _masks(edge_index, batch)[name]
    if n > x.size(0):  # virtual nodes: their rows appended after the real ones
        x = torch.cat([x, torch.randn(n - x.size(0), 16)])
    conv = GPSConv(16, None, heads=2, norm="layer_norm")
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = conv.global_attention(x1, mask=mask)
    want = _dense_attention(conv, x2, mask.dense(n, n))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(want)
    got.backward(grad)
    (d_params_got, d_x_got) = [p.grad.clone() for p in conv.attn.parameters()], x1.grad
    conv.zero_grad()
    want.backward(grad)
    torch.testing.assert_close(d_x_got, x2.grad, atol=1e-5, rtol=1e-4)
    for a, b in zip(d_params_got, conv.attn.parameters()):
        torch.testing.assert_close(a, b.grad, atol=1e-5, rtol=1e-4)
    out = conv(x, torch.zeros(2, 0, dtype=torch.long), mask=mask)  # the whole layer under the mask
    assert out.shape == x.shape and out.isfinite().all()


def test_mask_errors() -> None:
    x, edge_index, _, batch = _batch([3, 4])
    performer = GPSConv(16, None, heads=2, attn_type="performer")
    with pytest.raises(ValueError, match="mask= needs attn_type='multihead'"):
        performer(x, edge_index, batch, mask=SameGraph(batch))
    with pytest.raises(ValueError, match="packed node layout"):
        GPSConv(16, None, heads=2)(x, edge_index, batch, mask="edges")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attn_type must be"):
        GPSConv(16, None, attn_type="linear")


def test_recompute_keeps_values_gradients_and_statistics_with_less_saved() -> None:
    """``recompute=True``: the same outputs, gradients and running statistics (a batch norm inside the local
    layer, dropout in the MLP) as the default, with fewer bytes saved for the backward."""
    x, edge_index, edge_attr, batch = _batch([5, 1, 17, 3])
    layers = []
    for recompute in (False, True):
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        layers.append(GPSConv(16, GINEConv(mlp), heads=4, dropout=0.2, recompute=recompute).train())
    layers[1].load_state_dict(layers[0].state_dict())
    grad = torch.randn_like(x)
    results = []
    for layer in layers:
        saved: list[int] = []

        def pack(t: torch.Tensor, saved: list[int] = saved) -> torch.Tensor:
            saved.append(t.numel() * t.element_size())
            return t

        xi = x.clone().requires_grad_()
        torch.manual_seed(1)  # the same dropout draws
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = layer(xi, edge_index, batch, edge_attr=edge_attr)
        out.backward(grad)
        results.append((out, xi.grad, [p.grad for p in layer.parameters()], list(layer.buffers()), sum(saved)))
    (out0, dx0, dp0, b0, saved0), (out1, dx1, dp1, b1, saved1) = results
    torch.testing.assert_close(out1, out0)
    torch.testing.assert_close(dx1, dx0)
    for a, b in zip(dp1, dp0, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(b1, b0, strict=True):  # running statistics moved once, not twice
        torch.testing.assert_close(a, b)
    assert saved1 < 0.6 * saved0
    with torch.no_grad():  # no gradients: nothing to recompute, same outputs
        torch.testing.assert_close(layers[1].eval()(x, edge_index, batch, edge_attr=edge_attr),
                                   layers[0].eval()(x, edge_index, batch, edge_attr=edge_attr))
    again = layers[1].train()(x.clone().requires_grad_(), edge_index, batch, edge_attr=edge_attr).sum()
    again.backward(retain_graph=True)
    again.backward()  # a second backward recomputes once more
