r"""The full mask: every query attends every key."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm.masks._registry import register_mask
from attnmm.masks.base import UNBOUNDED, IntervalMask, Mask, Structure


@register_mask
class Full(IntervalMask):
    r"""Full attention, :math:`A(i) = \{0, \dots, S-1\}`.

    Examples:
        >>> from attnmm.masks import Full
        >>> Full()
        Full()
        >>> print(Full().picture(2, 3))
        1 1 1
        1 1 1
    """

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(q_idx), torch.full_like(q_idx, UNBOUNDED)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return torch.ones_like(q_idx + kv_idx, dtype=torch.bool)

    @property
    def structure(self) -> Structure:
        return Structure("full")

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return self  # every key, from anywhere

    def lookahead_error(self, step: int) -> str | None:
        return "Full() lets every query attend the whole sequence"

    def __repr__(self) -> str:
        return "Full()"
