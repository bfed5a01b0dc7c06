"""Checks shared by the tests of GATConv and GATv2Conv: PyG's layer with the same weights as the oracle
(outputs, attention weights, gradients of the inputs and of every parameter), and a dense reference
of masked additive attention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn


def pair(
    ref_cls: type[nn.Module], our_cls: type[nn.Module], *args: object, **kw: object
) -> tuple[nn.Module, nn.Module]:
    """PyG's layer and ours, in eval mode, ours holding PyG's state dict."""
    torch.manual_seed(0)
    ref = ref_cls(*args, **kw).eval()
    ours = our_cls(*args, **kw).eval()
    assert list(ours.state_dict()) == list(ref.state_dict())  # same names, same order
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def random_edges(num_src: int, num_dst: int, num_edges: int, seed: int, repeats: bool = True) -> Tensor:
    """Random directed edges (2, M), some of them self loops (when num_src = num_dst); with ``repeats``
    a third of them listed twice."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.stack(
        [torch.randint(0, num_src, (num_edges,), generator=g), torch.randint(0, num_dst, (num_edges,), generator=g)]
    )
    if repeats:
        edge_index = torch.cat([edge_index, edge_index[:, : num_edges // 3]], 1)
    return edge_index


def _close(a: Tensor | None, b: Tensor | None, what: str) -> None:
    if b is None:
        assert a is None or float(a.abs().max()) < 1e-6, what
        return
    assert a is not None, what
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=lambda m: f"{what}: {m}")


def assert_same(
    ref: nn.Module,
    ours: nn.Module,
    x: Tensor | tuple[Tensor, Tensor],
    edge_index: Tensor,
    edge_attr: Tensor | None = None,
    **call: object,
) -> tuple[Tensor, Tensor]:
    """Same output, returned edges, attention weights and gradients (of x, edge_attr and every
    parameter); returns our output and weights."""
    inputs = [t for t in (x if isinstance(x, tuple) else (x,)) if t is not None]
    if edge_attr is not None:
        inputs.append(edge_attr)
    for t in inputs:
        t.requires_grad_(True)
    names = [n for n, _ in ref.named_parameters()]
    labels = [f"d input {i}" for i in range(len(inputs))] + [f"d {n}" for n in names]
    results = []
    for layer in (ref, ours):  # one after the other: PyG's to_edge_index marks a sparse input coalesced in place
        out, (ei, alpha) = layer(x, edge_index, edge_attr, return_attention_weights=True, **call)
        torch.manual_seed(1)
        grad = torch.randn_like(out)
        grads = torch.autograd.grad(out, inputs + [layer.get_parameter(n) for n in names], grad, allow_unused=True)
        results.append((out, ei, alpha, grads))
    (out_r, ei_r, alpha_r, g_r), (out_o, ei_o, alpha_o, g_o) = results
    _close(out_o, out_r, "output")
    _close(alpha_o, alpha_r, "attention weights")
    if ei_r.layout != torch.strided:
        assert ei_o.layout == ei_r.layout
        _close(ei_o.to_dense(), ei_r.to_dense(), "returned adjacency")
    else:
        assert torch.equal(ei_o, ei_r), "returned edge_index"
    for a, b, what in zip(g_o, g_r, labels):
        _close(a, b, what)
    return out_o, alpha_o


def dense_reference(scores: Tensor, allowed: Tensor, values: Tensor, concat: bool = True) -> Tensor:
    """Masked softmax over dense scores (N_dst, N_src, H) where ``allowed`` (N_dst, N_src), times the
    values (N_src, H, C); rows with nothing allowed give 0."""
    s = scores.masked_fill(~allowed.unsqueeze(-1), float("-inf"))
    a = torch.softmax(s, dim=1).nan_to_num(0.0)  # (N_dst, N_src, H)
    out = torch.einsum("ijh,jhc->ihc", a, values)  # (N_dst, H, C)
    return out.flatten(1) if concat else out.mean(1)


def allowed_of(edge_index: Tensor, num_src: int, num_dst: int, loops: bool) -> Tensor:
    """The dense allowed set (N_dst, N_src) of the edges, with a self loop per node when ``loops``."""
    allowed = torch.zeros(num_dst, num_src, dtype=torch.bool)
    allowed[edge_index[1], edge_index[0]] = True
    if loops:
        n = min(num_src, num_dst)
        allowed[torch.arange(n), torch.arange(n)] = True
    return allowed


def check_extra_mask(conv: nn.Module, dense_scores: Callable[[nn.Module, Tensor], tuple[Tensor, Tensor]], n: int,
                     loops: bool) -> None:
    """A GAT layer's ``mask=`` (a composed mask, united with the edges) and a composed Mask given as
    the adjacency, both against the dense reference, values and input gradients."""
    from attnmm.masks import Causal, Graph, Window
    from attnmm.masks.graph_helpers import k_hop

    x = torch.randn(n, 6, requires_grad=True)
    edge_index = torch.unique(random_edges(n, n, 14, seed=7, repeats=False), dim=1)  # no repeats: a set
    scores, values = dense_scores(conv, x)
    extra = k_hop(edge_index, n, 2) & Causal()  # a composed mask, united with the edges
    allowed = allowed_of(edge_index, n, n, loops) | extra.dense(n, n)
    out, (pairs, weights) = conv(x, edge_index, return_attention_weights=True, mask=extra)
    expected = dense_reference(scores, allowed, values) + conv.bias
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    assert pairs.size(1) == int(allowed.sum()) and weights.shape == (pairs.size(1), 2)
    g = torch.randn_like(out)
    torch.testing.assert_close(*(torch.autograd.grad(o, x, g)[0] for o in (out, expected)), atol=1e-5, rtol=1e-4)
    # a composed Mask as the adjacency: the edges inside a window
    within = Graph(edge_index, n) & Window(2, 2)
    allowed = within.dense(n, n) | allowed_of(edge_index[:, :0], n, n, loops)
    expected = dense_reference(scores, allowed, values) + conv.bias
    torch.testing.assert_close(conv(x, within), expected, atol=1e-5, rtol=1e-4)


def check_dropout_in_training_only(ref: nn.Module, ours: nn.Module) -> None:
    """Equal to PyG in eval mode (no dropout); different draws in training."""
    x, edge_index = torch.randn(6, 8), random_edges(6, 6, 20, seed=8)
    assert_same(ref, ours, x, edge_index)
    ours.train()
    torch.manual_seed(0)
    a = ours(x, edge_index)
    torch.manual_seed(1)
    assert not torch.allclose(a, ours(x, edge_index))


def check_output_ignores_weights_flag(
    build: Callable[[], nn.Module], in_channels: int, edge_dim: int | None = None, seeds: int = 11
) -> None:
    """The output of a layer is the same, bit for bit, whether ``return_attention_weights`` is left out,
    ``True`` or ``False``: for one layer per seed on small random graphs (2 to 12 nodes, where the
    backends the core could pick differ most; 11 seeds: every size once, with and without repeated edges),
    given as an edge_index and as a sparse adjacency."""
    from torch_geometric.utils import to_torch_csc_tensor

    def output(result: Tensor | tuple[Tensor, object]) -> Tensor:
        return result[0] if isinstance(result, tuple) else result

    for seed in range(seeds):
        torch.manual_seed(seed)
        conv = build().eval()
        n = 2 + seed % 11
        x = torch.randn(n, in_channels)
        edge_index = random_edges(n, n, 1 + 2 * n, seed, repeats=seed % 2 == 1)
        edge_attr = None if edge_dim is None else torch.randn(edge_index.size(1), edge_dim)
        plain = conv(x, edge_index, edge_attr)
        for flag in (True, False):
            out = output(conv(x, edge_index, edge_attr, return_attention_weights=flag))
            assert torch.equal(out, plain), f"seed {seed}, return_attention_weights={flag}"
        if edge_dim is None:
            adj = to_torch_csc_tensor(torch.unique(edge_index, dim=1), size=(n, n)).t()  # (N_dst, N_src)
            plain = conv(x, adj)
            assert torch.equal(output(conv(x, adj, return_attention_weights=True)), plain), f"seed {seed}, sparse"


def check_graph_reads(build: Callable[[], nn.Module], monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph layer reads each graph once for every step that sees it (new but equal edge_index objects, as
    a loader gives; each layer keeps its reads in its own store), and never reuses a stale read: after an
    edit of the edges in place, whether
    the version counter sees it or not (through ``.numpy()``), or of a sparse adjacency's indices, its
    output is that of a fresh read (the cache emptied, a new tensor of the same edges)."""
    from attnmm.masks import Graph, _key

    reads = []
    original = Graph._with_edge_pairs.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(Graph, "_with_edge_pairs", classmethod(lambda cls, *a: reads.append(1) or original(cls, *a)))
    torch.manual_seed(0)
    layers = [build().eval() for _ in range(2)]

    def clear() -> None:
        for layer in layers:
            layer._forms.clear()

    x, edge_index = torch.randn(6, 8), random_edges(6, 6, 14, seed=3)
    for _ in range(2):  # two steps, a new edge_index each
        for layer in layers:
            layer(x, edge_index.clone())
    assert len(reads) == len(layers)  # once per layer, not again at the second step
    layers[0](x, edge_index[:, 1:])  # another graph
    assert len(reads) == len(layers) + 1

    def fresh(adjacency: Tensor) -> Tensor:
        clear()
        return layers[0](x, adjacency.clone())

    def edited_in_place(by_value: bool) -> None:
        clear()
        edges = random_edges(6, 6, 14, seed=4)
        before = layers[0](x, edges)
        _, returned = layers[0](x, edges, return_attention_weights=True)
        if returned[0] is not edges:  # (the edges with self loops added)
            returned[0].zero_()  # the caller edits what it got back: nothing the layer keeps
        edges[0, :4] = edges[0, :4].flip(0) + 1  # seen by the version counter
        edges[0, :4] %= 6
        after = layers[0](x, edges)
        assert not torch.allclose(after, before)
        torch.testing.assert_close(after, fresh(edges))
        version = edges._version
        edges.numpy()[1, :5] = (edges.numpy()[1, :5] + 2) % 6  # missed by the version counter
        assert edges._version == version
        torch.testing.assert_close(layers[0](x, edges), fresh(edges))
        if not by_value:  # named by identity: nothing outlives the call
            clear()
            layers[0](x, edges)
            assert layers[0]._forms.held_bytes() == 0

    edited_in_place(by_value=True)
    with monkeypatch.context() as m:
        m.setattr(_key, "VALUE_KEY_ELEMENTS", 1)  # every tensor named by identity, as a large one is
        edited_in_place(by_value=False)

    # a sparse adjacency (N_dst, N_src): its indices edited in place, and through NumPy
    clear()
    edges = torch.unique(random_edges(6, 6, 14, seed=5, repeats=False), dim=1)
    adj = torch.sparse_coo_tensor(edges.flip(0), torch.ones(edges.size(1)), (6, 6)).coalesce()
    before = layers[0](x, adj)
    adj._indices()[1, 0] = (adj._indices()[1, 0] + 1) % 6
    after = layers[0](x, adj)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, fresh(adj))
    adj._indices().numpy()[0, -1] = (adj._indices()[0, -1] + 3) % 6
    torch.testing.assert_close(layers[0](x, adj), fresh(adj))
