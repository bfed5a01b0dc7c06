r"""A mask seen from an offset: the part of a mask between a range of queries and a range of keys."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm.masks._pairs import Pairs
from attnmm.masks.base import IntervalMask, Mask, Structure

#: Below this many (L + q_offset) x (S + kv_offset) positions a shifted mask filters the dense form for
#: its pairs; above it, the inner mask's own pairs.
_DENSE_POSITIONS = 1 << 16


def _check_offsets(q_offset: int, kv_offset: int) -> tuple[int, int]:
    for name, value in (("q_offset", q_offset), ("kv_offset", kv_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return q_offset, kv_offset


class Shifted(Mask):
    r"""``inner`` between the queries at positions ``q_offset + i`` and the keys at ``kv_offset + j``:

    .. math::
        A'_b(i) = \{j : \mathrm{kv\_offset} + j \in A_b(\mathrm{q\_offset} + i)\}

    What :meth:`~attnmm.masks.Mask.shifted` gives for a mask that has no shifted form of its own: a block of a
    longer sequence (one document of a packing, one step of a stream) in the block's own coordinates.
    The predicate is the inner one at the absolute positions; the pairs are the inner mask's over the
    larger area, kept where both positions are past the offsets (or the dense form's, on small areas).

    Args:
        inner (Mask): the mask in absolute positions.
        q_offset (int): the absolute position of query 0.
        kv_offset (int): the absolute position of key 0.

    Examples:
        >>> from attnmm.masks import Grid
        >>> m = Grid(2, 3, kernel=3).shifted(3, 0)  # the second row's queries, every key
        >>> m
        Grid(height=2, width=3, kernel=3) at queries 3.., keys 0..
        >>> print(m.picture(3, 6))
        1 1 0 1 1 0
        1 1 1 1 1 1
        0 1 1 0 1 1
    """

    def __init__(self, inner: Mask, q_offset: int, kv_offset: int) -> None:
        self.inner = inner
        self.q_offset, self.kv_offset = _check_offsets(q_offset, kv_offset)
        self.layout = inner.layout  # type: ignore[assignment]
        self.batched = inner.batched

    @property
    def batch_size(self) -> int | None:
        return self.inner.batch_size

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        Mask.check(self, num_rows, num_cols, batch_size)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return self.inner.mask_mod(b, h, q_idx + self.q_offset, kv_idx + self.kv_offset)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        rows, cols = num_rows + self.q_offset, num_cols + self.kv_offset
        if rows * cols <= _DENSE_POSITIONS:
            dense = self.dense(num_rows, num_cols, batch_size, device=device)
            if dense.dim() == 2:
                row, col = dense.nonzero(as_tuple=True)
                return Pairs(row, col, None, num_rows, num_cols, None)
            batch, row, col = dense.nonzero(as_tuple=True)
            return Pairs(row, col, batch, num_rows, num_cols, batch_size)
        whole = self.inner.pairs(rows, cols, batch_size, device=device)
        keep = (whole.row >= self.q_offset) & (whole.col >= self.kv_offset)
        batch = whole.batch[keep] if whole.batch is not None else None
        row, col = whole.row[keep] - self.q_offset, whole.col[keep] - self.kv_offset
        return Pairs(row, col, batch, num_rows, num_cols, whole.batch_size)

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The inner mask's bound over the area from position 0 (this block lies in it); 0 for an empty
        block, ``None`` (no bound) when the inner mask is laid over its own shape only (a ``Segments``
        mask of fixed sizes answers for that shape alone)."""
        num_cols = num_rows if num_cols is None else num_cols
        if num_rows == 0 or num_cols == 0:
            return 0
        try:
            return self.inner.nnz_bound(num_rows + self.q_offset, num_cols + self.kv_offset, batch_size)
        except ValueError:
            return None

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        q_offset, kv_offset = _check_offsets(q_offset, kv_offset)
        return self.inner.shifted(self.q_offset + q_offset, self.kv_offset + kv_offset)

    def __repr__(self) -> str:
        return f"{self.inner!r} at queries {self.q_offset}.., keys {self.kv_offset}.."


class ShiftedInterval(Shifted, IntervalMask):
    r"""An interval mask seen from an offset, itself an interval mask: query :math:`i`'s key range is
    the inner range of query ``q_offset + i`` less ``kv_offset``, and the band moves by the offsets'
    difference :math:`d = \mathrm{q\_offset} - \mathrm{kv\_offset}` (``left - d``, ``right + d``, each
    at least 0), so a block of a banded mask stays banded.

    Examples:
        >>> from attnmm.masks import Chunk
        >>> m = Chunk(4, 0).shifted(2, 2)  # positions 2.. of chunks of 4: chunks end at 2, 6, ...
        >>> print(m.picture(5))
        1 1 0 0 0
        1 1 0 0 0
        0 0 1 1 1
        0 0 1 1 1
        0 0 1 1 1
        >>> m.structure.kind, m.band
        ('band', (3, 3))
    """

    inner: IntervalMask

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        start, end = self.inner.interval(b, q_idx + self.q_offset)
        return start - self.kv_offset, end - self.kv_offset

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return IntervalMask.mask_mod(self, b, h, q_idx, kv_idx)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        return IntervalMask._pairs(self, num_rows, num_cols, batch_size, device)

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        return IntervalMask.nnz_bound(self, num_rows, num_cols, batch_size)

    @property
    def band(self) -> tuple[int | None, int | None]:
        # a band is a bound on where the keys lie: a side pushed past the diagonal is bounded by it
        left, right = self.inner.band
        d = self.q_offset - self.kv_offset
        return (None if left is None else max(left - d, 0)), (None if right is None else max(right + d, 0))

    @property
    def structure(self) -> Structure:
        return IntervalMask.structure.fget(self)  # type: ignore[attr-defined]


__all__ = ["Shifted", "ShiftedInterval"]
