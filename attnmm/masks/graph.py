r"""Graph attention masks over PyG's packed node layout."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._pairs import Pairs
from attnmm.masks._registry import register_mask
from attnmm.masks.base import Mask


@register_mask
class Graph(Mask):
    r"""Graph attention: query node :math:`i` attends key node :math:`j` iff the edge
    :math:`j \to i` is in ``edge_index`` (PyG's ``source_to_target`` flow),
    :math:`A(i) = \{j : (j, i) \in \mathcal{E}\}`.

    Nodes use PyG's packed layout: the nodes of every graph of a batch in one tensor, so a batch of
    graphs is one block-diagonal mask. Repeated edges count once (the allowed set is a set).

    Args:
        edge_index (LongTensor): edges as (source, target) rows, shape (2, M).
        num_nodes (int or (int, int)): number of nodes N, or ``(num_source, num_target)`` for a
            bipartite graph (keys are source nodes, queries target nodes).

    Examples:
        >>> import torch
        >>> from attnmm.masks import Graph
        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> g
        Graph(num_nodes=3, num_edges=3)
        >>> print(g.picture(3))
        0 0 1
        1 0 0
        0 1 0
    """

    layout = "packed"

    def __init__(self, edge_index: Tensor, num_nodes: int | tuple[int, int]) -> None:
        if isinstance(num_nodes, tuple):
            if len(num_nodes) != 2:
                raise ValueError(f"num_nodes must be an int or (num_source, num_target), got {num_nodes!r}")
            num_src = check_nonneg_int("num_nodes[0]", num_nodes[0])
            num_dst = check_nonneg_int("num_nodes[1]", num_nodes[1])
        else:
            num_src = num_dst = check_nonneg_int("num_nodes", num_nodes)
        if not isinstance(edge_index, Tensor):
            raise TypeError(f"edge_index must be a LongTensor of shape (2, M), got {type(edge_index).__name__}")
        if edge_index.dtype not in (torch.long, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"edge_index must be an integer tensor of shape (2, M), got dtype {edge_index.dtype}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape (2, M), got shape {tuple(edge_index.shape)}")
        edge_index = edge_index.long()
        _check_range(edge_index, num_src, num_dst)
        self.edge_index = edge_index
        self.num_src, self.num_dst = num_src, num_dst
        # sorted unique keys target * num_src + source: the sparse form and the membership test
        self._keys = torch.unique(_flat_keys(edge_index, num_src, num_dst), sorted=True).long()

    @classmethod
    def _with_edge_pairs(cls, src: Tensor, dst: Tensor, num_nodes: tuple[int, int]) -> tuple[Graph, Tensor, Tensor]:
        """The graph of the edges ``src[k] -> dst[k]`` (LongTensors (M,), checked like ``edge_index``),
        the allowed pair of each edge (M,) in ``pairs()`` order and the number of edges of each pair (P,),
        from one sort of the edges. The graph owns its ``edge_index`` (a new (2, M) tensor whose rows
        are views for the caller)."""
        graph = cls.__new__(cls)
        graph.num_src, graph.num_dst = num_src, num_dst = num_nodes
        edge_index = torch.stack([src, dst])  # (2, M), a copy: no view of the caller's tensors
        _check_range(edge_index, num_src, num_dst)
        keys, edge_pair, counts = torch.unique(
            _flat_keys(edge_index, num_src, num_dst), sorted=True, return_inverse=True, return_counts=True
        )
        graph.edge_index, graph._keys = edge_index, keys.long()
        return graph, edge_pair, counts

    @property
    def num_edges(self) -> int:
        """Number of distinct allowed pairs."""
        return int(self._keys.numel())

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        if (num_rows, num_cols) != (self.num_dst, self.num_src):
            raise ValueError(
                f"{self!r} describes {self.num_dst} query (target) nodes and {self.num_src} key "
                f"(source) nodes, but the input has L={num_rows} queries and S={num_cols} keys"
            )
        if batch_size not in (None, 1):
            raise ValueError(
                f"a Graph mask uses the packed layout (one batch of N nodes), got batch size {batch_size}"
            )

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        keys = self._keys.to(q_idx.device)
        want = q_idx * self.num_src + kv_idx
        if keys.numel() == 0:
            return torch.zeros_like(want, dtype=torch.bool)
        pos = torch.searchsorted(keys, want).clamp(max=keys.numel() - 1)
        return keys[pos] == want

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        keys = self._keys.to(device)
        return Pairs(keys // max(num_cols, 1), keys % max(num_cols, 1), None, num_rows, num_cols, None)

    def nnz(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int:
        self._resolve(num_rows, num_cols, batch_size)
        return self.num_edges

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        return self.nnz(num_rows, num_cols, batch_size)

    def __repr__(self) -> str:
        nodes = self.num_src if self.num_src == self.num_dst else (self.num_src, self.num_dst)
        return f"Graph(num_nodes={nodes}, num_edges={self.num_edges})"


def _check_range(edge_index: Tensor, num_src: int, num_dst: int) -> None:
    """Raise unless every source lies in [0, num_src) and every target in [0, num_dst) (one host read)."""
    if not edge_index.numel():
        return
    low, src_max, dst_max = torch.stack([edge_index.min(), edge_index[0].max(), edge_index[1].max()]).tolist()
    if low < 0 or src_max >= num_src or dst_max >= num_dst:
        raise ValueError(
            f"edge_index out of range: sources must lie in [0, {num_src}) and targets in "
            f"[0, {num_dst}), got min {low}, max source {src_max}, max target {dst_max}; "
            "pass the right num_nodes"
        )


def _flat_keys(edge_index: Tensor, num_src: int, num_dst: int) -> Tensor:
    """``target * num_src + source`` of each edge (M,): int32 when every key fits (sorting them then
    costs about half as much), else int64."""
    if num_src * num_dst <= 2**31:
        return (edge_index[1].int() * num_src).add_(edge_index[0].int())
    return edge_index[1] * num_src + edge_index[0]


__all__ = ["Graph"]
