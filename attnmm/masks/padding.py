r"""Key padding of variable-length batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from attnmm._checks import as_whole_numbers
from attnmm.masks._registry import register_mask
from attnmm.masks.base import IntervalMask, Structure


def check_lengths(lengths: object, shape: str, *dims: int) -> Tensor:
    """``lengths`` (whole numbers >= 0, of ``dims`` dims, ``shape`` in the messages) as a long tensor."""
    lengths = as_whole_numbers("lengths", lengths, shape)
    assert isinstance(lengths, Tensor)  # (a tensor, whatever was given)
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor of shape {shape}, got dtype {lengths.dtype}")
    if lengths.dim() not in dims:
        raise ValueError(f"lengths must have shape {shape}, got shape {tuple(lengths.shape)}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got min {int(lengths.min())}")
    return lengths.long()


def shown(values: list[int]) -> str:
    """``values`` as a short list: the first 6, then ``...``."""
    return "[" + ", ".join(map(str, values[:6])) + (", ..." if len(values) > 6 else "") + "]"


@register_mask
class Padding(IntervalMask):
    r"""Key padding: :math:`A_b(i) = \{j : j < \mathrm{lengths}_b\}`.

    Compose it with another mask to restrict that mask to each item's real keys, e.g.
    ``Padding(lengths) & Window(16, 16)`` (which stays banded).

    Args:
        lengths (LongTensor or list of int): number of real keys of each batch item, shape (B,).

    Examples:
        >>> from attnmm.masks import Padding
        >>> m = Padding([2, 3])
        >>> m
        Padding(lengths=[2, 3])
        >>> print(m.picture(2, 3, b=0))
        1 1 0
        1 1 0
    """

    layout = "padded"
    batched = True

    def __init__(self, lengths: Tensor | Sequence[int]) -> None:
        self.lengths = check_lengths(lengths if isinstance(lengths, Tensor) else list(lengths), "(B,)", 1)
        self._batch_size = int(self.lengths.numel())

    @property
    def structure(self) -> Structure:
        """An interval (keys ``[0, lengths[b])``) that is key padding (``lengths``)."""
        return replace(super().structure, lengths=self.lengths)

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        if self.lengths.numel() and int(self.lengths.max()) > num_cols:
            raise ValueError(
                f"Padding lengths must be <= S={num_cols} (the number of keys), got max length "
                f"{int(self.lengths.max())}"
            )

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        end = self.lengths.to(b.device)[b]
        return torch.zeros_like(end), end + q_idx * 0

    def __repr__(self) -> str:
        return f"Padding(lengths={shown(self.lengths.tolist())})"
