r"""2-D neighbourhood attention over image patches."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._pairs import Pairs
from attnmm.masks._registry import register_mask
from attnmm.masks.base import Mask, Structure


@register_mask
class Grid(Mask):
    r"""2-D neighbourhood attention over patches laid out row-major on a ``height`` x ``width`` grid.

    With patch :math:`i` at row :math:`r_i`, column :math:`c_i` and radius
    :math:`\rho = \lfloor \mathrm{kernel} / 2 \rfloor \cdot \mathrm{dilation}`:

    - ``border="truncate"`` (default): :math:`A(i) = \{j : |r_j - r_i| \le \rho,\ |c_j - c_i| \le
      \rho,\ \text{both offsets multiples of dilation}\}`, the receptive field of a zero-padded
      convolution (fewer keys near the borders);
    - ``border="shift"``: NATTEN's neighbourhood attention, whose window is shifted inwards at the
      borders so every patch sees exactly ``kernel**2`` keys (needs ``kernel * dilation <= height``
      and ``<= width``).

    Args:
        height (int): patch rows.
        width (int): patch columns.
        kernel (int): odd window size (per side).
        dilation (int, optional): spacing of the window's taps. (default: :obj:`1`)
        border (str, optional): ``"truncate"`` or ``"shift"``. (default: :obj:`"truncate"`)

    Examples:
        >>> from attnmm.masks import Grid
        >>> Grid(3, 3, kernel=3)
        Grid(height=3, width=3, kernel=3)
        >>> print(Grid(2, 2, kernel=1).picture(4))
        1 0 0 0
        0 1 0 0
        0 0 1 0
        0 0 0 1
    """

    layout = "padded"

    def __init__(
        self, height: int, width: int, kernel: int, dilation: int = 1,
        border: Literal["truncate", "shift"] = "truncate",
    ) -> None:
        self.height = check_nonneg_int("height", height, minimum=1)
        self.width = check_nonneg_int("width", width, minimum=1)
        self.kernel = check_nonneg_int("kernel", kernel, minimum=1)
        self.dilation = check_nonneg_int("dilation", dilation, minimum=1)
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (a centred window), got {kernel}")
        if border not in ("truncate", "shift"):
            raise ValueError(f"border must be 'truncate' or 'shift', got {border!r}")
        if border == "shift" and self.kernel * self.dilation > min(self.height, self.width):
            raise ValueError(
                f"border='shift' needs kernel * dilation <= height and width, got "
                f"{self.kernel} * {self.dilation} on a {self.height} x {self.width} grid"
            )
        self.border = border

    @property
    def num_patches(self) -> int:
        """P = height * width."""
        return self.height * self.width

    @property
    def structure(self) -> Structure:
        """Sparse, on its grid; with truncated borders a convolution's receptive field (``window``), not
        with NATTEN's shifted window."""
        window = (self.kernel, self.dilation) if self.border == "truncate" else None
        return Structure(grid=(self.height, self.width), window=window)

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        p = self.num_patches
        if num_rows != p or num_cols != p:
            raise ValueError(f"{self!r} needs L = S = height * width = {p} patches, got L={num_rows}, S={num_cols}")

    def _window_1d(self, pos: Tensor, n: int) -> tuple[Tensor, Tensor]:
        """First tap and residue (pos mod dilation) of the window along one axis."""
        d, rad = self.dilation, self.kernel // 2
        group = pos % d
        if self.border == "truncate":
            return pos - rad * d, group
        size = (n - group + d - 1) // d  # positions in this dilation group
        start = (pos // d - rad).clamp(min=0)
        start = torch.minimum(start, size - self.kernel)
        return start * d + group, group

    def _allowed_1d(self, qpos: Tensor, kpos: Tensor, n: int) -> Tensor:
        first, group = self._window_1d(qpos, n)
        d = self.dilation
        last = first + (self.kernel - 1) * d
        return (kpos >= first) & (kpos <= last) & (kpos % d == group)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        w = self.width
        rows = self._allowed_1d(q_idx // w, kv_idx // w, self.height)
        return rows & self._allowed_1d(q_idx % w, kv_idx % w, self.width)

    def _taps_1d(self, n: int) -> int:
        """Number of in-range taps summed over the ``n`` positions of one axis."""
        pos = torch.arange(n)
        first, _ = self._window_1d(pos, n)
        taps = first.view(-1, 1) + torch.arange(self.kernel).view(1, -1) * self.dilation  # (n, kernel)
        return int(((taps >= 0) & (taps < n)).sum())

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The exact count in O((height + width) * kernel): the neighbourhood is a product of a row
        window and a column window, so the count is the product of the two axes' tap counts."""
        self._resolve(num_rows, num_cols, batch_size)
        return self._taps_1d(self.height) * self._taps_1d(self.width)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        w, k, d = self.width, self.kernel, self.dilation
        q = torch.arange(self.num_patches, device=device)
        taps = torch.arange(k, device=device) * d
        r0, _ = self._window_1d(q // w, self.height)
        c0, _ = self._window_1d(q % w, self.width)
        r = r0.view(-1, 1) + taps.view(1, k)  # (P, k)
        c = c0.view(-1, 1) + taps.view(1, k)  # (P, k)
        ok = ((r >= 0) & (r < self.height)).unsqueeze(2) & ((c >= 0) & (c < self.width)).unsqueeze(1)
        col = (r.unsqueeze(2) * w + c.unsqueeze(1)).view(-1, k * k)  # (P, k*k), sorted per row
        ok = ok.view(-1, k * k)
        row = q.view(-1, 1).expand_as(col)
        return Pairs(row[ok], col[ok], None, num_rows, num_cols, None)

    def __repr__(self) -> str:
        extra = f", dilation={self.dilation}" if self.dilation != 1 else ""
        extra += f", border={self.border!r}" if self.border != "truncate" else ""
        return f"Grid(height={self.height}, width={self.width}, kernel={self.kernel}{extra})"
