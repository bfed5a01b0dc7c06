r"""Graph masks for GNN experiments: batches of graphs, self loops, k-hop neighbourhoods, virtual
nodes, random expander edges (Exphormer), and hop distances for a shortest-path bias (full attention inside
each graph of a batch is the mask :class:`~attnmm.masks.SameGraph`).

Every helper works on PyG's packed layout and costs O(nnz) of what it builds: no N x N tensor is
made unless the allowed set itself is that large.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._pairs import Pairs
from attnmm.masks.graph import Graph


def graph_mask(data: Any, self_loops: bool = False) -> Graph:
    r"""The :class:`Graph` mask of a PyG ``Data`` or ``Batch``: :math:`A(i) = \{j : (j \to i) \in
    \mathcal{E}\}` (plus :math:`i` itself with ``self_loops``). A ``Batch`` packs its graphs with
    offset node indices, so its mask is block-diagonal over the graphs.

    Args:
        data (Data or Batch): has ``edge_index`` and ``num_nodes``.
        self_loops (bool, optional): also let every node attend itself. (default: :obj:`False`)

    Examples:
        >>> import torch
        >>> from torch_geometric.data import Batch, Data
        >>> g = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
        >>> print(graph_mask(Batch.from_data_list([g, g]), self_loops=True).picture(4))
        1 1 0 0
        1 1 0 0
        0 0 1 1
        0 0 1 1
    """
    num_nodes = int(data.num_nodes)
    edge_index = data.edge_index
    if self_loops:
        edge_index = torch.cat([edge_index, torch.arange(num_nodes, device=edge_index.device).repeat(2, 1)], 1)
    return Graph(edge_index, num_nodes)


def self_loops(num_nodes: int) -> Graph:
    r"""Every node attends itself only, :math:`A(i) = \{i\}`; compose with ``|`` to add self loops.

    Examples:
        >>> print(self_loops(3).picture(3))
        1 0 0
        0 1 0
        0 0 1
    """
    return Graph(torch.arange(check_nonneg_int("num_nodes", num_nodes)).repeat(2, 1), num_nodes)  # (2, N)


def _hops(edge_index: Tensor, num_nodes: int, max_hops: int) -> tuple[Tensor, Tensor]:
    """Breadth-first search from every node at once: sorted keys ``i * N + j`` of the pairs with a path
    j -> ... -> i of at most ``max_hops`` edges, and the length of the shortest such path (1 ... max_hops).

    Each step extends the pairs first reached in the previous one by an in-edge of their key node, so the
    cost is O(sum over steps of (new pairs x in-degree)), the size of the neighbourhoods built.
    """
    N = num_nodes
    counts = torch.bincount(edge_index[1], minlength=N)  # in-edges: sources sorted by target, target pointer
    sources = edge_index[0, torch.argsort(edge_index[1], stable=True)]
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    keys = torch.unique(edge_index[1] * N + edge_index[0])
    dist = torch.ones_like(keys)
    frontier = keys
    for step in range(2, max_hops + 1):
        if frontier.numel() == 0:
            break
        i, j = frontier // N, frontier % N
        deg = ptr[j + 1] - ptr[j]
        rep_i = torch.repeat_interleave(i, deg)
        start = torch.repeat_interleave(ptr[j], deg)
        within = torch.arange(rep_i.numel(), device=keys.device) - torch.repeat_interleave(deg.cumsum(0) - deg, deg)
        cand = torch.unique(rep_i * N + sources[start + within])
        pos = torch.searchsorted(keys, cand).clamp(max=max(keys.numel() - 1, 0))
        frontier = cand[keys[pos] != cand] if keys.numel() else cand
        keys, order = torch.sort(torch.cat([keys, frontier]))
        dist = torch.cat([dist, torch.full_like(frontier, step)])[order]
    return keys, dist


def k_hop(edge_index: Tensor, num_nodes: int, k: int) -> Graph:
    r"""k-hop neighbourhoods: :math:`A(i) = \{j : \text{a path } j \to \dots \to i \text{ of at most } k
    \text{ edges exists}\}`, built by breadth-first search in O(nnz of the result x degree).

    Args:
        edge_index (LongTensor): edges (2, M).
        num_nodes (int): number of nodes N.
        k (int): largest number of hops, >= 1.

    Examples:
        >>> import torch
        >>> path = torch.tensor([[0, 1, 2], [1, 2, 3]])  # 0 -> 1 -> 2 -> 3
        >>> print(k_hop(path, 4, k=2).picture(4))
        0 0 0 0
        1 0 0 0
        1 1 0 0
        0 1 1 0
    """
    check_nonneg_int("k", k, minimum=1)
    keys, _ = _hops(Graph(edge_index, num_nodes).edge_index, num_nodes, k)
    N = max(num_nodes, 1)
    return Graph(torch.stack([keys % N, keys // N]), num_nodes)


def hop_distance(edge_index: Tensor, num_nodes: int, pairs: Pairs, max_distance: int) -> Tensor:
    r"""Shortest-path length from key :math:`j` to query :math:`i` for each allowed pair of ``pairs``
    (Graphormer's spatial encoding), capped: 0 for :math:`i = j`, :math:`d \le` ``max_distance`` when a
    path of d edges exists, ``max_distance + 1`` otherwise. Costs the ``max_distance``-hop
    neighbourhoods, never an N x N table.

    Args:
        edge_index (LongTensor): edges (2, M).
        num_nodes (int): number of nodes N.
        pairs (Pairs): the allowed pairs, e.g. ``mask.pairs(N)``.
        max_distance (int): largest distance told apart, >= 1.

    Returns:
        LongTensor: distances (P,), in the order of ``pairs``.

    Examples:
        >>> import torch
        >>> from attnmm.masks import Full
        >>> path = torch.tensor([[0, 1, 2], [1, 2, 3]])
        >>> hop_distance(path, 4, Full().pairs(4), max_distance=2).view(4, 4)
        tensor([[0, 3, 3, 3],
                [1, 0, 3, 3],
                [2, 1, 0, 3],
                [3, 2, 1, 0]])
    """
    check_nonneg_int("max_distance", max_distance, minimum=1)
    keys, dist = _hops(Graph(edge_index, num_nodes).edge_index, num_nodes, max_distance)
    want = pairs.row * num_nodes + pairs.col
    out = torch.full_like(want, max_distance + 1)
    if keys.numel():
        pos = torch.searchsorted(keys, want).clamp(max=keys.numel() - 1)
        found = keys[pos] == want
        out = torch.where(found, dist[pos], out)
    return torch.where(pairs.row == pairs.col, torch.zeros_like(out), out)


def _graph_of(batch: Tensor | None, num_nodes: int, device: torch.device | None = None) -> tuple[Tensor, int]:
    if batch is None:
        return torch.zeros(num_nodes, dtype=torch.long, device=device), 1 if num_nodes else 0
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"batch must have shape (N,) = ({num_nodes},), got shape {tuple(batch.shape)}")
    return batch.long(), int(batch.max()) + 1 if batch.numel() else 0


def virtual_nodes(num_nodes: int, batch: Tensor | None = None) -> Graph:
    r"""One virtual (global) node per graph, appended after the N real nodes (node ``N + g`` for graph
    g): it attends every node of its graph and itself, and every node attends it. The mask is over
    N + G nodes; unite it with the graph's edges as ``Graph(edge_index, N + G) | virtual_nodes(N, batch)``
    and append G rows (e.g. a learned embedding) to the node features.

    Args:
        num_nodes (int): number of real nodes N.
        batch (LongTensor, optional): graph of each node (N,), PyG's ``batch``; ``None`` for one graph.

    Examples:
        >>> print(virtual_nodes(3).picture(4))
        0 0 0 1
        0 0 0 1
        0 0 0 1
        1 1 1 1
    """
    N = check_nonneg_int("num_nodes", num_nodes)
    graph, G = _graph_of(batch, N, None if batch is None else batch.device)
    nodes = torch.arange(N, device=graph.device)
    hub = N + graph
    virtual = torch.arange(N, N + G, device=graph.device)
    src = torch.cat([nodes, hub, virtual])
    dst = torch.cat([hub, nodes, virtual])
    return Graph(torch.stack([src, dst]), N + G)


def expander(
    num_nodes: int, degree: int, batch: Tensor | None = None, generator: torch.Generator | None = None,
    noise: Tensor | None = None,
) -> Graph:
    r"""Random expander edges inside each graph, as in Exphormer (Shirzad et al., 2023): the union of
    ``degree // 2`` random permutations of each graph's nodes, each taken in both directions, so every
    node gets about ``degree`` random neighbours (a random regular graph: an expander with high
    probability). Sparse global attention is ``Graph(edge_index, N) | expander(N, degree, batch)``.

    Args:
        num_nodes (int): number of nodes N.
        degree (int): even number of random edges per node, >= 2.
        batch (LongTensor, optional): graph of each node (N,); ``None`` for one graph.
        generator (torch.Generator, optional): source of randomness. (default: :obj:`None`)
        noise (Tensor, optional): (degree // 2, N) values in [0, 1) that order each permutation's nodes
            instead of random ones (fixed noise, fixed edges). (default: :obj:`None`)

    Examples:
        >>> g = expander(100, degree=4, generator=torch.Generator().manual_seed(0))
        >>> g.num_edges <= 400
        True
    """
    N = check_nonneg_int("num_nodes", num_nodes)
    degree = check_nonneg_int("degree", degree, minimum=2)
    if degree % 2:
        raise ValueError(f"degree must be even (each permutation adds an edge both ways), got {degree}")
    if noise is not None and tuple(noise.shape) != (degree // 2, N):
        raise ValueError(f"noise must be (degree // 2, num_nodes) = ({degree // 2}, {N}), got {tuple(noise.shape)}")
    graph, _ = _graph_of(batch, N, None if batch is None else batch.device)
    nodes = torch.argsort(graph, stable=True)  # nodes grouped by graph
    srcs, dsts = [], []
    for k in range(degree // 2):
        u = torch.rand(N, generator=generator).to(graph.device) if noise is None else noise[k].to(graph.device)
        perm = nodes[torch.argsort(graph[nodes] + u[nodes])]  # shuffled within each graph
        srcs += [nodes, perm]
        dsts += [perm, nodes]
    return Graph(torch.stack([torch.cat(srcs), torch.cat(dsts)]), N)  # (degree >= 2: at least one permutation)


__all__ = ["expander", "graph_mask", "hop_distance", "k_hop", "self_loops", "virtual_nodes"]
