r"""The causal mask of autoregressive models."""

from __future__ import annotations

from torch import Tensor

from attnmm.masks._registry import register_mask
from attnmm.masks.base import IntervalMask, Mask, Structure


@register_mask
class Causal(IntervalMask):
    r"""Causal attention, :math:`A(i) = \{j : j \le i\}` (top-left aligned when L != S, as SDPA's
    ``is_causal``).

    Examples:
        >>> from attnmm.masks import Causal
        >>> print(Causal().picture(3))
        1 0 0
        1 1 0
        1 1 1
    """

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        return q_idx * 0, q_idx + 1

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx

    @property
    def band(self) -> tuple[int | None, int | None]:
        return None, 0

    @property
    def structure(self) -> Structure:
        return Structure("causal", None, 0, interval=self.interval)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return self if q_offset == kv_offset else super().shifted(q_offset, kv_offset)  # j <= i reads the same

    def __repr__(self) -> str:
        return "Causal()"
