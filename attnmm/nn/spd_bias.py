r"""Graphormer's spatial encoding: a learned score bias per shortest-path distance, on the allowed pairs only."""

from __future__ import annotations

from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.masks import Mask
from attnmm.masks.graph_helpers import hop_distance


class ShortestPathBias(nn.Module):
    r"""The spatial encoding of "Do Transformers Really Perform Bad for Graph Representation?"
    (Ying et al., 2021): a learned bias per head for the shortest-path distance from key j to query i,

    .. math::
        b_{ij}^{(h)} = \mathbf{B}\left[\min(\phi(j, i), d_{\max} + 1),\, h\right]

    given only on the allowed pairs of a mask, in ``mask.pairs()`` order, ready for ``bias=`` of
    :func:`~attnmm.attend` or :class:`~attnmm.nn.MultiHeadAttention`. Distances come from a
    breadth-first search up to :math:`d_{\max}` hops (:func:`~attnmm.masks.graph_helpers.hop_distance`);
    no N x N distance table is built.

    Args:
        num_heads (int): number of heads H.
        max_distance (int, optional): largest distance told apart :math:`d_{\max}`; farther or
            unreachable pairs share one bias. (default: :obj:`5`)

    Shapes:
        - **input:** mask over N nodes with P allowed pairs, edge_index (2, M), num_nodes N
        - **output:** bias (P, H)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Full
        >>> spd = ShortestPathBias(num_heads=2, max_distance=3)
        >>> ring = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> spd(Full(), ring, 4).shape  # (P, H) with P = 4 * 4
        torch.Size([16, 2])
    """

    def __init__(self, num_heads: int, max_distance: int = 5) -> None:
        super().__init__()
        self.num_heads = check_nonneg_int("num_heads", num_heads, minimum=1)
        self.max_distance = check_nonneg_int("max_distance", max_distance, minimum=1)
        self.table = nn.Embedding(self.max_distance + 2, self.num_heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.table.weight)

    def forward(self, mask: Mask, edge_index: Tensor, num_nodes: int) -> Tensor:
        pairs = mask.pairs(num_nodes, num_nodes, device=edge_index.device)
        return self.table(hop_distance(edge_index, num_nodes, pairs, self.max_distance))  # (P, H)


__all__ = ["ShortestPathBias"]
