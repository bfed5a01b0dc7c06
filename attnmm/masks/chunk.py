r"""Chunked attention: exact for streaming, chunk by chunk."""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._registry import register_mask
from attnmm.masks.base import IntervalMask, Mask, Structure, unbounded


@register_mask
class Chunk(IntervalMask):
    r"""Chunked attention with limited history:
    :math:`A(i) = \{j : c(i) - \mathrm{left\_chunks} \le c(j) \le c(i)\}` with
    :math:`c(i) = \lfloor i / \mathrm{size} \rfloor`.

    A query sees its own chunk and ``left_chunks`` chunks before it, never a later chunk, so running
    chunk by chunk with a cache of earlier chunks gives exactly the full-sequence result.

    Args:
        size (int): chunk length (> 0).
        left_chunks (int): number of earlier chunks visible (>= 0).

    Examples:
        >>> from attnmm.masks import Chunk
        >>> Chunk(2, 1)
        Chunk(size=2, left_chunks=1)
        >>> print(Chunk(2, 0).picture(4))
        1 1 0 0
        1 1 0 0
        0 0 1 1
        0 0 1 1
    """

    def __init__(self, size: int, left_chunks: int) -> None:
        self.size = check_nonneg_int("size", size, minimum=1)
        self.left_chunks = check_nonneg_int("left_chunks", left_chunks)

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        # sizes past any sequence length are capped, and chunks before the first are empty, so that
        # (c - left_chunks) * size stays within the index dtype
        bound = unbounded(q_idx)
        size, left_chunks = min(self.size, bound), min(self.left_chunks, bound)
        c = q_idx // size
        return (c - left_chunks).clamp(min=0) * size, (c + 1) * size

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        bound = unbounded(q_idx)
        size = min(self.size, bound)
        cq, ck = q_idx // size, kv_idx // size
        return (ck <= cq) & (ck >= cq - min(self.left_chunks, bound))

    @property
    def band(self) -> tuple[int | None, int | None]:
        return (self.left_chunks + 1) * self.size - 1, self.size - 1

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        if q_offset == kv_offset and q_offset % self.size == 0:  # the chunks read the same from a chunk start
            return self
        return super().shifted(q_offset, kv_offset)

    @property
    def structure(self) -> Structure:
        """A band whose look-ahead ends at the chunk's end (``chunk``: its size)."""
        return replace(super().structure, chunk=self.size)

    def __repr__(self) -> str:
        return f"Chunk(size={self.size}, left_chunks={self.left_chunks})"
