r"""Mini-batches of nodes with sampled neighbourhoods, for graphs too large for one full batch.

PyG's :class:`~torch_geometric.loader.NeighborLoader` samples with compiled kernels from
``pyg-lib`` or ``torch-sparse`` and raises without either; attnmm depends on neither. So
:func:`neighbor_loader` uses ``NeighborLoader`` where one is installed and otherwise PyG's own
:class:`~torch_geometric.loader.NodeLoader` with :class:`UniformNeighborSampler`, the same uniform
sampling written in plain torch. Both give the same kind of batch: a ``Data`` subgraph whose first
``batch_size`` nodes are the seeds, with ``n_id`` (global node ids), ``e_id`` and ``batch_size``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.sampler import BaseSampler, SamplerOutput

from attnmm._checks import check_nonneg_int

__all__ = ["UniformNeighborSampler", "neighbor_loader"]


class UniformNeighborSampler(BaseSampler):
    r"""Uniform neighbour sampling (GraphSAGE, Hamilton et al., 2017) in plain torch, a
    ``BaseSampler`` for PyG's ``NodeLoader``.

    From the seed nodes, hop :math:`h` draws for every node reached at hop :math:`h - 1` at most
    :math:`k_h` of its incoming edges (``j -> i``, PyG's source-to-target flow) uniformly without
    replacement (all of them when :math:`k_h < 0` or the node has fewer), and adds their sources.
    The subgraph holds the drawn edges only. Cost per batch: the in-degrees of the reached nodes
    plus a sort, never O(number of nodes) of the whole graph after construction.

    Args:
        edge_index (Tensor): edges (2, M), row 0 the sources j, row 1 the targets i.
        num_nodes (int): number of nodes N.
        num_neighbors (list[int]): edges drawn per node at each hop; ``-1`` for all.

    Examples:
        >>> from torch_geometric.sampler import NodeSamplerInput
        >>> edge_index = torch.tensor([[1, 2, 3, 4], [0, 0, 1, 1]])  # 1 -> 0, 2 -> 0, 3 -> 1, 4 -> 1
        >>> out = UniformNeighborSampler(edge_index, 5, [-1, -1]).sample_from_nodes(
        ...     NodeSamplerInput(input_id=None, node=torch.tensor([0])))
        >>> out.node.tolist(), out.num_sampled_nodes, out.num_sampled_edges
        ([0, 1, 2, 3, 4], [1, 2, 2], [2, 2])
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, num_neighbors: list[int]) -> None:
        self.num_nodes = check_nonneg_int("num_nodes", num_nodes)
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape (2, M), got {tuple(edge_index.shape)}")
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
            raise ValueError(f"edge_index holds node ids outside [0, {num_nodes}); pass the right num_nodes")
        if not num_neighbors:
            raise ValueError("num_neighbors needs one entry per hop, e.g. [10, 10], got []")
        self.num_neighbors = [int(k) for k in num_neighbors]
        edge_index = edge_index.cpu()
        # incoming edges grouped by target (CSC): node i's are positions ptr[i] .. ptr[i + 1]
        self.edge_ids = torch.sort(edge_index[1], stable=True).indices  # (M,)
        self.sources = edge_index[0, self.edge_ids]  # (M,)
        counts = torch.bincount(edge_index[1], minlength=num_nodes)
        self.ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (N + 1,)

    def _hop(self, frontier: Tensor, k: int) -> Tensor:
        """Positions (in CSC order) of the edges drawn into each node of ``frontier``."""
        start, deg = self.ptr[frontier], self.ptr[frontier + 1] - self.ptr[frontier]
        owner = torch.repeat_interleave(torch.arange(frontier.numel()), deg)  # (E,) frontier slot of each edge
        first = torch.cumsum(deg, 0) - deg  # (F,) first candidate of each frontier node
        pos = start[owner] + torch.arange(owner.numel()) - first[owner]
        if k < 0:
            return pos
        # a random rank within each node's candidates; keep ranks < k
        order = torch.argsort(torch.rand(owner.numel()))
        order = order[torch.sort(owner[order], stable=True).indices]
        rank = torch.arange(owner.numel()) - first[owner[order]]
        return pos[order[rank < k]]

    def sample_from_nodes(self, index: Any, **kwargs: Any) -> SamplerOutput:
        seeds = index.node.cpu()
        nodes, rows, cols, edges = [seeds], [], [], []
        seen, frontier = seeds.unique(), seeds
        num_nodes, num_edges = [seeds.numel()], []
        for k in self.num_neighbors:
            pos = self._hop(frontier, k)
            targets = torch.repeat_interleave(frontier, self.ptr[frontier + 1] - self.ptr[frontier])
            if k >= 0:  # the target of each kept position, found from its CSC slot
                targets = torch.searchsorted(self.ptr, pos, right=True) - 1
            src = self.sources[pos]
            new = src.unique()
            new = new[~torch.isin(new, seen)]
            seen = torch.cat([seen, new]).unique()
            nodes.append(new)
            rows.append(src)
            cols.append(targets)
            edges.append(self.edge_ids[pos])
            num_nodes.append(new.numel())
            num_edges.append(pos.numel())
            frontier = new
        node = torch.cat(nodes)
        # global -> local ids: the first position of each node in ``node`` (seeds first)
        sorted_ids, where = torch.sort(node, stable=True)

        def local(x: Tensor) -> Tensor:
            return where[torch.searchsorted(sorted_ids, x)]

        return SamplerOutput(
            node=node, row=local(torch.cat(rows)), col=local(torch.cat(cols)), edge=torch.cat(edges),
            num_sampled_nodes=num_nodes, num_sampled_edges=num_edges, metadata=(index.input_id, index.time),
        )

    def sample_from_edges(self, index: Any, neg_sampling: Any = None) -> Any:
        raise NotImplementedError(
            "UniformNeighborSampler samples around nodes only (NodeLoader); for link prediction install "
            "pyg-lib and use PyG's LinkNeighborLoader"
        )


class _SeedMask:
    """Batch transform: ``{stage}_mask`` marks the seeds (the first ``batch_size`` nodes) only, so a
    node sampled as a neighbour is not counted in that stage's loss or metric."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def __call__(self, batch: Any) -> Any:
        batch[f"{self.stage}_mask"] = torch.arange(batch.num_nodes) < batch.batch_size
        return batch


def neighbor_loader(
    data: Any, stage: str, num_neighbors: list[int], batch_size: int, shuffle: bool = False, num_workers: int = 0,
) -> Any:
    r"""Batches of the nodes of ``data`` in ``data[f"{stage}_mask"]`` with sampled neighbourhoods.

    PyG's ``NeighborLoader`` when ``pyg-lib`` or ``torch-sparse`` is installed, else PyG's
    ``NodeLoader`` with :class:`UniformNeighborSampler`. In each batch ``{stage}_mask`` marks the
    seeds, so :class:`~attnmm.lightning.ClassificationTask` scores every node of the split once.

    Args:
        data (Data): the whole graph with ``edge_index`` and a boolean ``{stage}_mask``.
        stage (str): ``"train"``, ``"val"`` or ``"test"``.
        num_neighbors (list[int]): neighbours drawn per node at each hop (``-1``: all); as many hops
            as the model has message-passing layers.
        batch_size (int): seed nodes per batch.
        shuffle (bool, optional): shuffle the seeds each epoch. (default: :obj:`False`)
        num_workers (int, optional): DataLoader workers. (default: :obj:`0`)
    """
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import NeighborLoader, NodeLoader

    seeds = data[f"{stage}_mask"].nonzero().view(-1)
    common = dict(input_nodes=seeds, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                  transform=_SeedMask(stage))
    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        return NeighborLoader(data, num_neighbors=num_neighbors, **common)
    sampler = UniformNeighborSampler(data.edge_index, data.num_nodes, num_neighbors)
    return NodeLoader(data, node_sampler=sampler, **common)
