r"""Packed documents: many variable-length documents in one sequence, attention within each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from attnmm.masks._registry import register_mask
from attnmm.masks.base import IntervalMask, Structure
from attnmm.masks.padding import check_lengths, shown


@register_mask
class Documents(IntervalMask):
    r"""Attention within each of the documents packed one after another into a sequence (the
    ``cu_seqlens`` layout of variable-length attention kernels).

    With document :math:`d` of item :math:`b` occupying positions
    :math:`[c_{b,d}, c_{b,d+1})`, :math:`c_{b,d} = \sum_{d' < d} \mathrm{lengths}_{b,d'}`:

    .. math::
        A_b(i) = \{j : c_{b,d} \le j < c_{b,d+1}\} \quad\text{for } c_{b,d} \le i < c_{b,d+1},
        \qquad A_b(i) = \emptyset \quad\text{for } i \ge \textstyle\sum_d \mathrm{lengths}_{b,d}

    Positions past the last document (padding) attend nothing and are attended by nothing; a document
    of length 0 takes no position. Each query's allowed set is one key range, so the mask is an
    interval mask with the band ``(max length - 1, max length - 1)``: ``Documents(lengths) & Causal()``
    and ``& Window(left, right)`` stay banded (O(L * w) on the band kernel); a packing shared by the
    batch may also run one document at a time on fused SDPA (``segments``), dispatch picking by cost.

    Args:
        lengths (LongTensor or list): document lengths, shape (D,) for one packing shared by the batch,
            or (B, D) for one packing per batch item (pad the rows with zero-length documents).

    Examples:
        >>> from attnmm.masks import Causal, Documents
        >>> m = Documents([2, 0, 3])
        >>> m
        Documents(lengths=[2, 0, 3])
        >>> print((m & Causal()).picture(6))
        1 0 0 0 0 0
        1 1 0 0 0 0
        0 0 1 0 0 0
        0 0 1 1 0 0
        0 0 1 1 1 0
        0 0 0 0 0 0
        >>> (m & Causal()).structure.kind
        'band'
    """

    layout = "padded"

    def __init__(self, lengths: Tensor | Sequence[int] | Sequence[Sequence[int]]) -> None:
        self.lengths = lengths = check_lengths(lengths, "(D,) or (B, D)", 1, 2).detach().cpu()
        self.batched = lengths.dim() == 2
        self._batch_size = int(lengths.size(0)) if self.batched else None
        rows = lengths if self.batched else lengths.view(1, -1)  # (B or 1, D)
        ends = rows.cumsum(1)  # (B or 1, D)
        self._totals = totals = rows.sum(1)
        # key range [start, end) of every position, (B or 1, T + 1); the last column (and every
        # position past an item's documents) is the empty range of the padding
        width = int(totals.max()) + 1 if totals.numel() else 1
        flat = rows.reshape(-1)
        doc = torch.repeat_interleave(torch.arange(flat.numel()), flat)  # document of each position
        item = doc // max(rows.size(1), 1)
        pos = torch.arange(doc.numel()) - (totals.cumsum(0) - totals)[item]
        self._start = torch.zeros(rows.size(0), width, dtype=torch.long)
        self._end = torch.zeros(rows.size(0), width, dtype=torch.long)
        self._start[item, pos] = (ends.reshape(-1) - flat)[doc]
        self._end[item, pos] = ends.reshape(-1)[doc]

    @staticmethod
    def from_cu_seqlens(cu_seqlens: Tensor | Sequence[int]) -> Documents:
        """The mask of the cumulative offsets ``cu_seqlens`` (D + 1,) of variable-length kernels
        (``[0, l_0, l_0 + l_1, ...]``).

        Examples:
            >>> Documents.from_cu_seqlens([0, 3, 3, 7])
            Documents(lengths=[3, 0, 4])
        """
        cu = torch.as_tensor(cu_seqlens, dtype=torch.long)
        if cu.dim() != 1 or cu.numel() == 0 or int(cu[0]) != 0:
            raise ValueError(f"cu_seqlens must be a 1-D tensor starting at 0, got {cu.tolist()}")
        return Documents(cu.diff())

    @property
    def cu_seqlens(self) -> Tensor:
        """Document offsets ``[0, l_0, l_0 + l_1, ...]``, (D + 1,) or (B, D + 1)."""
        return torch.nn.functional.pad(self.lengths.cumsum(-1), (1, 0))

    @property
    def structure(self) -> Structure:
        """A band (``(max length - 1, max length - 1)``); ``documents`` for one packing shared by the batch."""
        return replace(super().structure, documents=None if self.batched else self.lengths)

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        total = int(self._totals.max()) if self._totals.numel() else 0
        if total > min(num_rows, num_cols):
            raise ValueError(
                f"{self!r} packs {total} tokens but the input has L={num_rows} queries and S={num_cols} "
                "keys; pack at most L and S tokens (pad the sequence, or drop documents)"
            )

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        start, end = self._start.to(q_idx.device), self._end.to(q_idx.device)
        pos = q_idx.clamp(0, start.size(1) - 1)  # every position past the documents: the empty range
        item = b if self.batched else 0
        return start[item, pos], end[item, pos]

    @property
    def band(self) -> tuple[int | None, int | None]:
        width = max(int(self.lengths.max()) - 1, 0) if self.lengths.numel() else 0
        return width, width

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The exact count, the sum of the squared lengths, in O(D)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        return int(self.lengths.square().sum())

    def __repr__(self) -> str:
        if not self.batched:
            return f"Documents(lengths={shown(self.lengths.tolist())})"
        rows = [shown(r) for r in self.lengths.tolist()[:2]]
        more = ", ..." if self.lengths.size(0) > 2 else ""
        return f"Documents(lengths=[{', '.join(rows)}{more}])"


__all__ = ["Documents"]
