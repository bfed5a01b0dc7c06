"""The GAT benchmark cases: attnmm.nn.GATConv and GATv2Conv against PyG's layers of the same names.

The sizes, the random edges, the training call and the gradient comparison are those of the
AttentionConv case (``benchmarks/graph_conv.py``): N = 100k nodes, M = 1M random edges, 64 input
channels, heads = 4, 64 channels per head, forward + backward (gradients of the input features and of
every weight), both layers holding the same weights; the layers add their default self loops. As
there, the rows run with the same edge_index object at every call and with a new one of the same edges
(``ours_new``, ``peer_new``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks import graph_conv
from benchmarks.graph_conv import HEADS, IN_CHANNELS, N_EDGES, N_NODES, OUT_CHANNELS, Inputs


def make_build(name: str, nodes: int = N_NODES, edges: int = N_EDGES) -> Callable[[], Inputs]:
    """Inputs of both sides for the layer ``name`` (``"GATConv"`` or ``"GATv2Conv"``), at other sizes for
    the tests."""

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
        x = torch.randn(nodes, IN_CHANNELS, generator=g).requires_grad_(True)
        edge_index = torch.randint(0, nodes, (2, edges), generator=g)
        grad = torch.randn(nodes, HEADS * OUT_CHANNELS, generator=g)
        return {"x": x, "edge_index": edge_index, "grad": grad, "ours": ours, "peer": peer, "name": name}

    return build


build_gat, build_gatv2 = make_build("GATConv"), make_build("GATv2Conv")
#: The small-graph setting: Cora's numbers of nodes and edges (the edges random, as above).
build_gat_cora = make_build("GATConv", 2708, 10556)
ours, peer = graph_conv.ours, graph_conv.peer
ours_new, peer_new = graph_conv.ours_new, graph_conv.peer_new


def check(inp: Inputs) -> str:
    """Outputs and gradients of both layers agree (relative to the largest value, or absolute below 1)."""
    return graph_conv.agreement(inp, f"attnmm {inp['name']}", f"PyG {inp['name']}")


def check_new(inp: Inputs) -> str:
    """As :func:`check`, each call given a new copy of the edges."""
    return graph_conv.agreement(inp, f"attnmm {inp['name']}", f"PyG {inp['name']}", new_edges=True)


verdict = graph_conv.at_least(2, 4)
