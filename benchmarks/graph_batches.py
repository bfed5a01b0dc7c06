"""The mini-batch GAT benchmark case: attnmm.nn.GATConv against PyG's GATConv, a new batch of graphs at
every call.

A training step of mini-batch graph learning: :data:`GRAPHS` small random graphs of :data:`NODES` nodes
and :data:`EDGES` random directed edges each, joined as one disjoint union (PyG's batch layout: the
edges of graph g offset by g * NODES), drawn anew at every call: a new edge_index of new edges at every
step, so nothing derived from one step's edges serves the next. 64 input channels, heads = 4, 64 channels
per head, forward + backward (gradients of the node features and of every weight), both layers holding
the same weights and adding their default self loops. Each side draws its batches from a generator of
the same seed, so the i-th call of either side sees the same graphs, and the drawing costs both the same.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from benchmarks import gat_conv, graph_conv
from benchmarks.graph_conv import Inputs

GRAPHS, NODES, EDGES = 1024, 32, 256

#: Seed of the batches both sides draw.
SEED = 5


def random_batch(generator: torch.Generator, graphs: int = GRAPHS, nodes: int = NODES, edges: int = EDGES) -> Tensor:
    """The edge_index (2, graphs * edges) of ``graphs`` random graphs of ``nodes`` nodes and ``edges`` edges
    each, as one disjoint union over graphs * nodes nodes."""
    local = torch.randint(0, nodes, (2, graphs, edges), generator=generator)  # (2, G, m)
    offset = torch.arange(graphs).mul_(nodes).view(1, -1, 1)  # first node of each graph
    return local.add_(offset).view(2, -1)


def make_build(graphs: int = GRAPHS, nodes: int = NODES, edges: int = EDGES) -> Callable[[], Inputs]:
    """Inputs of both sides: the layers with equal weights, the node features of a batch and the sizes of
    its graphs (smaller ones for the tests)."""

    def build() -> Inputs:
        inputs = gat_conv.make_build("GATConv", graphs * nodes, 0)()
        del inputs["edge_index"]  # drawn at every call
        return inputs | {"sizes": (graphs, nodes, edges)}

    return build


build = make_build()


def _train(module_key: str) -> Callable[[Inputs], Callable[[], None]]:
    def make(inp: Inputs) -> Callable[[], None]:
        module, generator = inp[module_key], torch.Generator().manual_seed(SEED)

        def run() -> None:
            edge_index = random_batch(generator, *inp["sizes"])
            inp["x"].grad = None
            module.zero_grad(set_to_none=True)
            module(inp["x"], edge_index).backward(inp["grad"])

        return run

    return make


ours, peer = _train("ours"), _train("peer")


def check(inp: Inputs) -> str:
    """Outputs and gradients of both layers agree on two batches in a row, as :func:`graph_conv.agreement`
    has them agree."""
    generator = torch.Generator().manual_seed(SEED)
    lines = []
    for _ in range(2):
        batch = inp | {"edge_index": random_batch(generator, *inp["sizes"])}
        lines.append(graph_conv.agreement(batch, "attnmm GATConv", "PyG GATConv", new_edges=True))
    return "; ".join(lines)


verdict = graph_conv.at_least(3, 5)
