"""The Exphormer peer's adapter: the recipe's GraphAdapter whose attention mask is each graph's edges, random
expander edges inside each graph and self loops (the ``expander`` mask of the graph_masks_* sweeps).

As in Exphormer (Shirzad et al., 2023) a graph's expander edges are drawn once and kept: they are the union
of ``degree // 2`` permutations of the graph's nodes, each taken both ways, and a permutation's order comes
from a hash of the graph's content (its size and its atoms' features), the node's place in the graph, the
permutation's number and ``expander_seed``. So a peptide gets the same edges in every batch and epoch,
without a per-graph cache, and two runs with the same seed draw the same graphs. A config names it by
``class_path: studies.peptides_field.expander.ExpanderAdapter`` (the repository on the path).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor

from attnmm.adapters import GraphAdapter
from attnmm.adapters.graph import GraphTokens
from attnmm.masks import Graph

_M1, _M2 = 0x5851F42D4C957F2D, 0x14057B7EF767814F  # odd 63-bit multipliers of the integer hash


def _mix(h: Tensor) -> Tensor:
    """An integer hash of int64 values (multiply and xor-shift rounds; int64 products wrap)."""
    for m in (_M1, _M2):
        h = h ^ (h >> 29)
        h = h * m
    return h ^ (h >> 32)


def graph_keys(x: Tensor, batch: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
    """A content key per graph (G,) (its size and its nodes' features, each weighted by its place) and each
    node's place in its graph (N,)."""
    counts = torch.bincount(batch, minlength=num_graphs)
    start = torch.cumsum(counts, 0) - counts
    place = torch.arange(batch.numel(), device=batch.device) - start[batch]
    feats = x.long().view(x.size(0), -1) if x.dim() > 1 else x.long().view(-1, 1)
    weights = torch.arange(1, feats.size(1) + 1, device=x.device) * 1_000_003
    node = _mix(((feats + 1) * weights).sum(1) + place * 7919)
    keys = torch.zeros(num_graphs, dtype=torch.long, device=x.device).index_add_(0, batch, node)
    return _mix(keys + counts), place


def expander_edges(x: Tensor, batch: Tensor, num_graphs: int, degree: int, seed: int) -> Tensor:
    """The expander edges (2, N * degree) of a packed batch (nodes grouped by graph, as PyG batches them)."""
    if degree < 2 or degree % 2:
        raise ValueError(f"degree must be even and >= 2, got {degree}")
    keys, place = graph_keys(x, batch, num_graphs)
    nodes = torch.arange(batch.numel(), device=batch.device)
    src, dst = [], []
    for k in range(degree // 2):
        h = _mix(keys[batch] + _mix(place + (k + 1) * 0x1E3779B97F4A7C15 + seed))
        noise = (h & ((1 << 52) - 1)).double() / float(1 << 52)  # [0, 1)
        perm = torch.argsort(batch.double() + noise)  # each graph's nodes shuffled in place
        src += [nodes, perm]
        dst += [perm, nodes]
    return torch.stack([torch.cat(src), torch.cat(dst)])


class ExpanderAdapter(GraphAdapter):
    """:class:`~attnmm.adapters.GraphAdapter` attending along the edges, ``expander_degree`` random expander
    edges per node and self loops (``scope`` is ignored: the mask is always that union).

    Args:
        expander_degree (int, optional): even number of expander edges per node. (default: :obj:`4`)
        expander_seed (int, optional): which expander graphs are drawn. (default: :obj:`0`)

    The other arguments are :class:`~attnmm.adapters.GraphAdapter`'s.
    """

    def __init__(
        self,
        in_channels: int = 16,
        d_model: int | None = 64,
        pe: Literal["none", "laplacian", "random_walk"] = "none",
        pe_dim: int = 8,
        self_loops: bool = True,
        dropout: float = 0.0,
        scope: Literal["edges", "graph"] = "edges",
        cardinalities: list[int] | None = None,
        edge_cardinalities: list[int] | None = None,
        expander_degree: int = 4,
        expander_seed: int = 0,
    ) -> None:
        super().__init__(in_channels, d_model, pe, pe_dim, self_loops, dropout, scope, cardinalities,
                         edge_cardinalities)
        if expander_degree < 2 or expander_degree % 2:
            raise ValueError(f"expander_degree must be even and >= 2, got {expander_degree}")
        self.expander_degree, self.expander_seed = expander_degree, expander_seed

    def forward(self, batch: Any) -> GraphTokens:
        tokens = super().forward(batch)
        N = tokens.x.size(0)
        graph = tokens.batch
        num_graphs = int(graph.max()) + 1 if N else 0
        x = getattr(batch, "x", None)
        x = torch.zeros(N, 1, dtype=torch.long, device=graph.device) if x is None else x
        loops = torch.arange(N, device=graph.device).repeat(2, 1)
        extra = expander_edges(x, graph, num_graphs, self.expander_degree, self.expander_seed)
        mask = Graph(torch.cat([batch.edge_index, extra, loops], 1), N)
        return replace(tokens, mask=mask)
