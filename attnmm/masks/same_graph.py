r"""Full attention inside each graph of a packed PyG batch (the global attention of graph transformers)."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm.masks._pairs import Pairs, pairs_from_ranges
from attnmm.masks._registry import register_mask
from attnmm.masks.base import Mask, Structure


@register_mask
class SameGraph(Mask):
    r"""Full attention inside each graph of a packed batch, :math:`A(i) = \{j : g(j) = g(i)\}` with
    :math:`g` PyG's ``batch`` vector: the global attention of graph transformers without padding.
    Its pairs number :math:`\sum_g n_g^2`.

    Args:
        batch (LongTensor): graph of each node (N,), sorted (as in a PyG ``Batch``).

    Examples:
        >>> import torch
        >>> m = SameGraph(torch.tensor([0, 0, 1]))
        >>> m
        SameGraph(num_graphs=2, num_nodes=3)
        >>> print(m.picture(3))
        1 1 0
        1 1 0
        0 0 1
    """

    layout = "packed"

    def __init__(self, batch: Tensor) -> None:
        if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.is_floating_point():
            raise ValueError(f"batch must be an integer tensor of shape (N,), got {batch!r:.80}")
        batch = batch.long()
        if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ValueError("batch must be sorted (nodes of each graph contiguous), as in a PyG Batch")
        self.batch = batch
        self.num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        counts = torch.bincount(batch, minlength=self.num_graphs)
        self._start = (counts.cumsum(0) - counts)[batch]  # first node of each node's graph (N,)
        self._end = self._start + counts[batch]
        self._documents: Mask | None = None  # the padded form, built when asked

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        n = self.batch.numel()
        if (num_rows, num_cols) != (n, n):
            raise ValueError(f"{self!r} describes {n} nodes, but the input has L={num_rows} and S={num_cols}")

    @property
    def structure(self) -> Structure:
        """Sparse; ``padded``: the graphs as :class:`~attnmm.masks.Documents` of their sizes, packed one
        after another (the nodes of a graph are contiguous), the same allowed set, which
        :func:`~attnmm.attend` computes one graph at a time on fused SDPA (the ``segments`` backend)
        where that is estimated cheaper than the pairs on the sparse kernel."""
        if self._documents is None:
            from attnmm.masks.documents import Documents

            self._documents = Documents(torch.bincount(self.batch, minlength=self.num_graphs))
        return Structure(padded=self._documents)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        graph = self.batch.to(q_idx.device)
        return graph[q_idx] == graph[kv_idx]

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        row, col = pairs_from_ranges(self._start.to(device), self._end.to(device))
        return Pairs(row, col, None, num_rows, num_cols, None)

    def __repr__(self) -> str:
        return f"SameGraph(num_graphs={self.num_graphs}, num_nodes={self.batch.numel()})"

