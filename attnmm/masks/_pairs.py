"""The sparse form of a mask: allowed (query, key) index pairs sorted by query."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Pairs:
    r"""Allowed index pairs :math:`\{(b, i, j) : j \in A_b(i)\}`, sorted by ``(batch, row, col)``.

    Args:
        row (LongTensor): query index ``i`` of each pair, shape (P,).
        col (LongTensor): key index ``j`` of each pair, shape (P,).
        batch (LongTensor, optional): batch item ``b`` of each pair, shape (P,); ``None`` when the
            allowed set is the same for every batch item.
        num_rows (int): number of queries L.
        num_cols (int): number of keys S.
        batch_size (int, optional): number of batch items B when ``batch`` is given.
    """

    row: Tensor
    col: Tensor
    batch: Tensor | None
    num_rows: int
    num_cols: int
    batch_size: int | None = None

    @property
    def nnz(self) -> int:
        """Number of allowed pairs P."""
        return int(self.row.numel())

    @property
    def num_segments(self) -> int:
        """Number of softmax segments: ``B * L`` when batched, else ``L``."""
        return (self.batch_size or 1) * self.num_rows if self.batch is not None else self.num_rows

    def segment(self) -> Tensor:
        """Flat segment id ``b * L + i`` of each pair, shape (P,), non-decreasing."""
        if self.batch is None:
            return self.row
        return self.batch * self.num_rows + self.row

    def crow(self) -> Tensor:
        """Compressed row pointer over the segments, shape (num_segments + 1,)."""
        counts = torch.bincount(self.segment(), minlength=self.num_segments)
        return torch.cat([counts.new_zeros(1), counts.cumsum(0)])

    def select(self, keep: Tensor) -> Pairs:
        """The pairs where ``keep`` (P,) is True, in order."""
        batch = None if self.batch is None else self.batch[keep]
        return Pairs(self.row[keep], self.col[keep], batch, self.num_rows, self.num_cols, self.batch_size)

    def expand(self, batch_size: int) -> Pairs:
        """The same pairs repeated for each of ``batch_size`` batch items (no-op when batched)."""
        if self.batch is not None:
            return self
        batch = torch.arange(batch_size, device=self.row.device).repeat_interleave(self.nnz)
        return Pairs(self.row.repeat(batch_size), self.col.repeat(batch_size), batch, self.num_rows, self.num_cols,
                     batch_size)

    def to_dense(self) -> Tensor:
        """Bool tensor (L, S), or (B, L, S) when batched, True at every pair."""
        lead = () if self.batch is None else (self.batch_size or 0,)
        out = torch.zeros(*lead, self.num_rows, self.num_cols, dtype=torch.bool, device=self.row.device)
        out[(self.row, self.col) if self.batch is None else (self.batch, self.row, self.col)] = True
        return out


def pairs_from_ranges(start: Tensor, end: Tensor) -> tuple[Tensor, Tensor]:
    """Expand per-segment half-open key ranges ``[start, end)`` into (segment, col) pairs in O(P).

    ``start`` and ``end`` have one entry per segment (already clamped to ``[0, S]``); the result is
    sorted by segment and then by column.
    """
    counts = (end - start).clamp(min=0)
    seg = torch.repeat_interleave(torch.arange(start.numel(), device=start.device), counts)
    # position of each pair inside its segment: global index minus the segment's first index
    offsets = counts.cumsum(0) - counts
    col = torch.arange(seg.numel(), device=start.device) - offsets[seg] + start[seg]
    return seg, col


def pairs_from_keys(keys: Tensor, num_rows: int, num_cols: int, batch_size: int | None) -> Pairs:
    """Build sorted, de-duplicated :class:`Pairs` from flat keys ``(b * L + i) * S + j``."""
    keys = torch.unique(keys, sorted=True)
    col = keys % max(num_cols, 1)
    seg = keys // max(num_cols, 1)
    if batch_size is None:
        return Pairs(seg, col, None, num_rows, num_cols, None)
    return Pairs(seg % num_rows, col, seg // num_rows, num_rows, num_cols, batch_size)


def broadcast_shape(*shapes: torch.Size | tuple[int, ...]) -> tuple[int, ...]:
    """The shape the given shapes broadcast to (they must be compatible): ``torch.broadcast_shapes``
    without its first call's import of torch's symbolic-shape machinery (about 40 MB)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for dims in zip(*((1,) * (ndim - len(s)) + tuple(s) for s in shapes)):
        sizes = {d for d in dims if d != 1}
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
