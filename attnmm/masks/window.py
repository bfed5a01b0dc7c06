r"""Truncated (sliding-window) attention, as used by speech encoders."""

from __future__ import annotations

from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._registry import register_mask
from attnmm.masks.base import IntervalMask, Mask, unbounded


@register_mask
class Window(IntervalMask):
    r"""Truncated self-attention: :math:`A(i) = \{j : i - \mathrm{left} \le j \le i + \mathrm{right}\}`.

    ``Window(left, 0)`` is a causal sliding window; ``Window(left, right)`` with ``right > 0`` looks
    ``right`` frames ahead.

    Args:
        left (int): how many keys before the query are visible.
        right (int): how many keys after the query are visible (look-ahead).

    Examples:
        >>> from attnmm.masks import Window
        >>> Window(1, 1)
        Window(left=1, right=1)
        >>> print(Window(1, 1).picture(4))
        1 1 0 0
        1 1 1 0
        0 1 1 1
        0 0 1 1
    """

    def __init__(self, left: int, right: int) -> None:
        self.left = check_nonneg_int("left", left)
        self.right = check_nonneg_int("right", right)

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        # widths past any sequence length are capped, so that q_idx + right cannot overflow the index dtype
        bound = unbounded(q_idx)
        return q_idx - min(self.left, bound), q_idx + min(self.right, bound) + 1

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        bound = unbounded(q_idx)
        return (kv_idx >= q_idx - min(self.left, bound)) & (kv_idx <= q_idx + min(self.right, bound))

    @property
    def band(self) -> tuple[int | None, int | None]:
        return self.left, self.right

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return self if q_offset == kv_offset else super().shifted(q_offset, kv_offset)  # i - j reads the same

    def __repr__(self) -> str:
        return f"Window(left={self.left}, right={self.right})"
