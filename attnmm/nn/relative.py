r"""Learned relative position bias for windowed, grid and full attention."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.attention.backends._memory import PAIR_BYTES, check_mask_pairs
from attnmm.masks import Full, Mask, grid_size


def _offset_range(name: str, low: int, high: int, dilation: int) -> tuple[int, int, int]:
    if low > high:
        raise ValueError(f"{name}: the smallest offset must be <= the largest, got {low} > {high}")
    if low % dilation or high % dilation:
        raise ValueError(f"{name}: offsets {low} and {high} must be multiples of dilation={dilation}")
    return low, high, (high - low) // dilation + 1


class RelativePositionBias(nn.Module):
    r"""Learned relative position bias (Shaw et al., 2018; T5, Raffel et al., 2020; Swin, Liu et al.,
    2021): one learned score per head and relative offset, added to the attention scores.

    .. math::
        s_{ij} = \mathbf{q}_i^\top \mathbf{k}_j \cdot \mathrm{scale} + \beta_{h}\left[\delta(i, j)\right]

    In 1-D, :math:`\delta(i, j) = j - i`, in ``[min_offset, max_offset]``. In 2-D (patches
    row-major on a grid of width :math:`W`), :math:`\delta(i, j) = (r_j - r_i, c_j - c_i)` with
    :math:`r = \lfloor i / W \rfloor`, :math:`c = i \bmod W`, each component in its range. Offsets
    are multiples of ``dilation``; the table has one row per offset in range,
    :math:`\beta \in \mathbb{R}^{T \times H}`.

    :meth:`forward` returns the bias of every allowed pair of a mask, aligned with
    ``mask.pairs(L, S, B)``: the ``bias`` argument of :func:`attnmm.attend`. The constructors name
    the table each mask needs:

    - :meth:`for_window` (``Window(left, right)``, alone or composed with ``Causal``/``Padding``):
      :math:`T = \mathrm{left} + \mathrm{right} + 1`;
    - :meth:`for_grid` (``Grid(height, width, kernel, dilation)``): :math:`T = \mathrm{kernel}^2`
      (:math:`(2\,\mathrm{kernel} - 1)^2` for ``border="shift"``, whose windows shift at the borders);
    - :meth:`for_patches` (full attention over an ``height`` x ``width`` grid):
      :math:`T = (2\,\mathrm{height} - 1)(2\,\mathrm{width} - 1)`.

    An offset outside the table raises, unless ``clip=True`` (T5-style: offsets are clamped into
    the range, so every farther key shares the edge bias).

    Args:
        num_heads (int): number of heads H.
        max_offset (int or (int, int)): largest offset; a pair ``(rows, cols)`` makes the bias 2-D.
        min_offset (int or (int, int), optional): smallest offset, of the same kind as
            ``max_offset``. (default: :obj:`-max_offset`)
        dilation (int, optional): spacing of the offsets (a dilated grid's taps). (default: :obj:`1`)
        grid_size (int, int, optional): ``(height, width)`` of the patch grid, for a 2-D bias under a
            mask that is not a :class:`~attnmm.masks.Grid` (e.g. :obj:`None` = full attention).
            (default: :obj:`None`)
        clip (bool, optional): clamp out-of-range offsets instead of raising. (default: :obj:`False`)

    Shapes:
        - **input:** a mask, ``num_rows`` L, ``num_cols`` S (default L) and, for a batched mask,
          ``batch_size`` B
        - **output:** (P, H), one row per pair of ``mask.pairs(L, S, B)``

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Window
        >>> rpb = RelativePositionBias.for_window(num_heads=4, left=2, right=0)
        >>> rpb.table.shape  # (left + right + 1, H)
        torch.Size([3, 4])
        >>> mask = Window(2, 0)
        >>> q = k = v = torch.randn(1, 4, 10, 8)  # (B, H, L, E)
        >>> attend(q, k, v, mask, bias=rpb(mask, 10, 10)).shape
        torch.Size([1, 4, 10, 8])
    """

    def __init__(
        self, num_heads: int, max_offset: int | tuple[int, int], min_offset: int | tuple[int, int] | None = None, *,
        dilation: int = 1, grid_size: tuple[int, int] | None = None, clip: bool = False,
    ) -> None:
        super().__init__()
        self.num_heads = check_nonneg_int("num_heads", num_heads, minimum=1)
        self.dilation = check_nonneg_int("dilation", dilation, minimum=1)
        self.clip = bool(clip)
        self.two_d = isinstance(max_offset, (tuple, list))
        highs = tuple(max_offset) if isinstance(max_offset, (tuple, list)) else (max_offset,)
        if min_offset is None:
            lows = tuple(-int(h) for h in highs)
        else:
            lows = tuple(min_offset) if isinstance(min_offset, (tuple, list)) else (min_offset,)
        if len(highs) not in (1, 2) or len(lows) != len(highs):
            raise ValueError(
                f"max_offset and min_offset must both be ints (1-D) or both (rows, cols) pairs (2-D), "
                f"got max_offset={max_offset!r}, min_offset={min_offset!r}"
            )
        axes = ("offset",) if len(highs) == 1 else ("row offset", "column offset")
        self.ranges = tuple(_offset_range(a, int(lo), int(hi), self.dilation) for a, lo, hi in zip(axes, lows, highs))
        if grid_size is not None:
            if not self.two_d:
                raise ValueError("grid_size is for a 2-D bias; pass max_offset as a (rows, cols) pair")
            height, width = (check_nonneg_int(f"grid_size[{k}]", n, minimum=1) for k, n in enumerate(grid_size))
            grid_size = (height, width)
        self.grid_size = grid_size
        self.table = nn.Parameter(torch.empty(math.prod(n for _, _, n in self.ranges), self.num_heads))
        self.reset_parameters()

    # ---------------------------------------------------------------- constructors per mask

    @classmethod
    def for_window(cls, num_heads: int, left: int, right: int, clip: bool = False) -> RelativePositionBias:
        """The bias of ``Window(left, right)``: offsets ``j - i`` in ``[-left, right]``."""
        left = check_nonneg_int("left", left)
        right = check_nonneg_int("right", right)
        return cls(num_heads, right, -left, clip=clip)

    @classmethod
    def for_grid(
        cls, num_heads: int, kernel: int, dilation: int = 1, border: Literal["truncate", "shift"] = "truncate",
    ) -> RelativePositionBias:
        """The bias of ``Grid(height, width, kernel, dilation, border)``: ``kernel**2`` offsets, or
        ``(2 * kernel - 1)**2`` with ``border="shift"``."""
        kernel = check_nonneg_int("kernel", kernel, minimum=1)
        dilation = check_nonneg_int("dilation", dilation, minimum=1)
        if border not in ("truncate", "shift"):
            raise ValueError(f"border must be 'truncate' or 'shift', got {border!r}")
        reach = (kernel // 2 if border == "truncate" else kernel - 1) * dilation
        return cls(num_heads, (reach, reach), dilation=dilation)

    @classmethod
    def for_patches(cls, num_heads: int, height: int, width: int) -> RelativePositionBias:
        """The bias of full attention over a ``height`` x ``width`` grid of patches (Swin's table of
        ``(2 * height - 1) * (2 * width - 1)`` offsets)."""
        height = check_nonneg_int("height", height, minimum=1)
        width = check_nonneg_int("width", width, minimum=1)
        return cls(num_heads, (height - 1, width - 1), grid_size=(height, width))

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)

    # ---------------------------------------------------------------- lookup

    def _index(self, offsets: tuple[Tensor, ...], row: Tensor, col: Tensor) -> Tensor:
        """Table row of each pair's offset; raises on an offset outside the table."""
        index = torch.zeros_like(row)
        for axis, (off, (low, high, n)) in enumerate(zip(offsets, self.ranges)):
            if self.clip:
                off = off.clamp(low, high)
            bad = (off < low) | (off > high) | ((off - low) % self.dilation != 0)
            if bool(bad.any()):
                p = int(bad.nonzero()[0, 0])
                step = f" in steps of {self.dilation}" if self.dilation != 1 else ""
                what = "j - i" if len(offsets) == 1 else ("row offset", "column offset")[axis]
                raise ValueError(
                    f"{self!r}: pair (i={int(row[p])}, j={int(col[p])}) has {what} = {int(off[p])}, "
                    f"outside the table's offsets [{low}, {high}]{step}; build the bias for this mask "
                    "(RelativePositionBias.for_window / for_grid / for_patches) or pass clip=True"
                )
            index = index * n + torch.div(off - low, self.dilation, rounding_mode="floor")
        return index

    def _width(self, mask: Mask, num_rows: int, num_cols: int) -> int:
        size = grid_size(mask) or self.grid_size
        if size is None:
            raise ValueError(
                f"a 2-D relative bias needs the patch grid's width to turn indices into (row, col), "
                f"but {mask!r} is not a Grid mask; use a Grid mask or build the bias with grid_size"
            )
        if self.grid_size is not None and size != self.grid_size:
            raise ValueError(f"{self!r} was built for a {self.grid_size} grid but {mask!r} is {size}")
        if num_rows != size[0] * size[1] or num_cols != size[0] * size[1]:
            raise ValueError(
                f"a 2-D relative bias over a {size[0]} x {size[1]} grid needs L = S = {size[0] * size[1]} "
                f"patches, got L={num_rows}, S={num_cols}"
            )
        return size[1]

    def forward(
        self, mask: Mask | None, num_rows: int, num_cols: int | None = None, batch_size: int | None = None
    ) -> Tensor:
        mask = Full() if mask is None else mask
        if not isinstance(mask, Mask):
            raise TypeError(f"mask must be an attnmm.masks.Mask or None, got {type(mask).__name__}")
        L, S = num_rows, num_rows if num_cols is None else num_cols
        # the pairs and the (P, H) bias: refuse early when they cannot fit
        check_mask_pairs(mask, L, S, batch_size, self.table.device, PAIR_BYTES + 8 * self.num_heads)
        pairs = mask.pairs(L, S, batch_size if mask.batched else None, device=self.table.device)
        row, col = pairs.row, pairs.col
        if self.two_d:
            w = self._width(mask, L, S)
            offsets: tuple[Tensor, ...] = (col // w - row // w, col % w - row % w)
        else:
            offsets = (col - row,)
        return self.table[self._index(offsets, row, col)]  # (P, H)

    def extra_repr(self) -> str:
        lows = [lo for lo, _, _ in self.ranges]
        highs = [hi for _, hi, _ in self.ranges]
        fmt = (lambda v: str(v[0])) if not self.two_d else (lambda v: str(tuple(v)))
        out = f"num_heads={self.num_heads}, max_offset={fmt(highs)}, min_offset={fmt(lows)}"
        out += f", dilation={self.dilation}" if self.dilation != 1 else ""
        out += f", grid_size={self.grid_size}" if self.grid_size is not None else ""
        return out + (", clip=True" if self.clip else "")


__all__ = ["RelativePositionBias"]
