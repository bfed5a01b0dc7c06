"""The GAT benchmark cases: attnmm.nn.GATConv and GATv2Conv against PyG's layers of the same names.

The sizes, the random edges, the training call and the gradient comparison are those of the
AttentionConv case (``benchmarks/graph_conv.py``): N = 100k nodes, M = 1M random edges, 64 input
channels, heads = 4, 64 channels per head, forward + backward (gradients of the input features and of
every weight), both layers holding the same weights; the layers add their default self loops.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks import graph_conv
from benchmarks.graph_conv import HEADS, IN_CHANNELS, N_EDGES, N_NODES, OUT_CHANNELS, Inputs


def _build(name: str) -> Callable[[], Inputs]:
    """Inputs of both sides for the layer ``name`` (``"GATConv"`` or ``"GATv2Conv"``)."""

    def build() -> Inputs:
        import warnings

        import torch_geometric.nn

        import attnmm.nn

        g = torch.Generator().manual_seed(11)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(11)
            peer = getattr(torch_geometric.nn, name)(IN_CHANNELS, OUT_CHANNELS, heads=HEADS)
        ours = getattr(attnmm.nn, name)(IN_CHANNELS, OUT_CHANNELS, heads=HEADS)
        ours.load_state_dict(peer.state_dict())
        x = torch.randn(N_NODES, IN_CHANNELS, generator=g).requires_grad_(True)
        edge_index = torch.randint(0, N_NODES, (2, N_EDGES), generator=g)
        grad = torch.randn(N_NODES, HEADS * OUT_CHANNELS, generator=g)
        return {"x": x, "edge_index": edge_index, "grad": grad, "ours": ours, "peer": peer, "name": name}

    return build


build_gat, build_gatv2 = _build("GATConv"), _build("GATv2Conv")
ours, peer = graph_conv.ours, graph_conv.peer


def check(inp: Inputs) -> str:
    """Outputs and gradients of both layers agree (relative to the largest value, or absolute below 1)."""
    a, b = graph_conv._grads(inp, "ours"), graph_conv._grads(inp, "peer")
    err = max(float((x - y).abs().max() / y.abs().max().clamp(min=1.0)) for x, y in zip(a, b))
    name = inp["name"]
    if not err <= 1e-4:
        raise AssertionError(f"attnmm {name} differs from PyG's: max relative error {err:.1e} > 1e-4")
    return f"max |attnmm {name} - PyG {name}| / max = {err:.1e} (output and all gradients)"


def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
    return f"{tp / to:.1f}x faster, {mp / mo:.1f}x less memory", tp / to >= 2 and mp / mo >= 4
