r"""Blocked band layout of the band backend: queries in blocks of T, keys in overlapping windows.

Query block :math:`n` holds queries :math:`i \in [nT, nT + T)`; every key it may see lies in
:math:`j \in [nT - \mathrm{left}, nT + T + \mathrm{right})`, a window of
:math:`W = T (1 + c)` keys, :math:`c = \lceil (\mathrm{left} + \mathrm{right}) / T \rceil`. Keys are
stored once, padded by ``left`` in front, in one flat buffer where the B * H sequences follow each
other; window :math:`n` is the strided view starting at row :math:`nT`, so windows of consecutive
blocks overlap and are never copied. Scores live in a (B * H * nbp, T, W) tensor: O(L * w) memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class BandGeometry:
    """Sizes of the blocked band layout.

    Args:
        B (int): batch size.
        H (int): heads.
        L (int): queries.
        S (int): keys.
        left (int): keys visible before the query (clamped to L - 1).
        right (int): keys visible after the query (clamped to S - 1).
        T (int): queries per block.
    """

    B: int
    H: int
    L: int
    S: int
    left: int
    right: int
    T: int

    @staticmethod
    def build(
        B: int, H: int, L: int, S: int, left: int, right: int, block: int | None = None  # noqa: N803
    ) -> BandGeometry:
        left, right = min(left, max(L - 1, 0)), min(right, max(S - 1, 0))
        T = block if block is not None else choose_block(left + right + 1)
        T = max(1, min(T, 1 << max(L - 1, 0).bit_length()))
        return BandGeometry(B, H, L, S, left, right, T)

    @property
    def c(self) -> int:
        """Extra blocks a window spans beyond its own."""
        return -(-(self.left + self.right) // self.T)

    @property
    def W(self) -> int:  # noqa: N802 - the window width
        return self.T * (1 + self.c)

    @property
    def nb(self) -> int:
        """Blocks holding real queries."""
        return -(-self.L // self.T)

    @property
    def nbp(self) -> int:
        """Blocks per sequence in the padded layout (real blocks plus ``c`` spill-over blocks)."""
        return self.nb + self.c

    @property
    def stored_keys(self) -> int:
        """Keys kept per sequence: every key a real query can see."""
        return min(self.S, self.nbp * self.T - self.left)

    def pad_queries(self, x: Tensor, scale: float = 1.0) -> Tensor:
        """(B, H, L, E) -> query blocks (B*H*nbp, T, E) times ``scale``, zero past L."""
        BH, E = self.B * self.H, x.size(-1)
        out = x.new_empty(BH, self.nbp * self.T, E)
        torch.mul(x.reshape(BH, self.L, E), scale, out=out[:, : self.L])
        out[:, self.L :] = 0
        return out.view(BH * self.nbp, self.T, E)

    def unpad_queries(self, x: Tensor) -> Tensor:
        """Query blocks (B*H*nbp, T, E) -> (B, H, L, E)."""
        return x.view(self.B, self.H, self.nbp * self.T, -1)[:, :, : self.L]

    def pad_keys(self, x: Tensor) -> Tensor:
        """(B, H, S, E) -> flat key buffer ((B*H*nbp + c) * T, E), key j of a sequence at row j + left."""
        BH, E, n, left = self.B * self.H, x.size(-1), self.stored_keys, self.left
        flat = x.new_empty((BH * self.nbp + self.c) * self.T, E)
        flat[BH * self.nbp * self.T :] = 0
        seqs = flat[: BH * self.nbp * self.T].view(BH, self.nbp * self.T, E)
        seqs[:, :left] = 0
        seqs[:, left : left + n] = x.reshape(BH, self.S, E)[:, :n]
        seqs[:, left + n :] = 0
        return flat

    def windows(self, flat: Tensor) -> Tensor:
        """The overlapping key windows of a flat key buffer, a view (B*H*nbp, W, E)."""
        E = flat.size(-1)
        return flat.as_strided((self.B * self.H * self.nbp, self.W, E), (self.T * E, E, 1))

    def new_key_grad(self, like: Tensor, dim: int) -> Tensor:
        """A zero flat key-gradient buffer (B*H*nbp + c, T, dim) for :meth:`accumulate_keys`."""
        return like.new_zeros(self.B * self.H * self.nbp + self.c, self.T, dim)

    def accumulate_keys(self, flat: Tensor, g0: int, x: Tensor, y: Tensor, alpha: float = 1.0) -> None:
        r"""Add :math:`\alpha X_g^\top Y_g` of the global blocks ``g0, g0 + 1, ...`` onto the keys their
        windows cover: x (G, T, W) (slots of each window), y (G, T, E), flat (B*H*nbp + c, T, E). The
        adjoint of :meth:`windows`, with one ``baddbmm`` per T-wide slice of the window."""
        T, G = self.T, x.size(0)
        for r in range(1 + self.c):
            part = x[:, :, r * T : (r + 1) * T].transpose(1, 2)  # (G, T keys, T queries)
            flat[g0 + r : g0 + r + G].baddbmm_(part, y, alpha=alpha)

    def unpad_keys(self, flat: Tensor) -> Tensor:
        """Flat key buffer (B*H*nbp + c, T, E) -> (B, H, S, E), the adjoint of :meth:`pad_keys`."""
        BH, E, n = self.B * self.H, flat.size(-1), self.stored_keys
        seqs = flat[: BH * self.nbp].view(BH, self.nbp * self.T, E)
        if n == self.S:  # a strided view, no copy
            return seqs[:, self.left : self.left + n].unflatten(0, (self.B, self.H))
        out = flat.new_zeros(BH, self.S, E)
        out[:, :n] = seqs[:, self.left : self.left + n]
        return out.view(self.B, self.H, self.S, E)

    def chunks(self, elements: int = 1 << 21) -> list[tuple[int, int]]:
        """Ranges of global blocks (over B*H*nbp) of about ``elements`` scores each."""
        total, step = self.B * self.H * self.nbp, max(1, elements // (self.T * self.W))
        return [(g, min(g + step, total)) for g in range(0, total, step)]

    def slot(self, row: Tensor, col: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Block, row-in-block and window column of the pairs (row, col)."""
        n = torch.div(row, self.T, rounding_mode="floor")
        return n, row - n * self.T, col + self.left - n * self.T


def choose_block(width: int) -> int:
    """Queries per block for a band of ``width`` keys per query: about an eighth of the width, 16 to
    64 (small blocks waste fewer window slots; on 2 CPU cores, 16 and 32 were fastest for w = 129)."""
    t = 16
    while t < 64 and 8 * t < width:
        t *= 2
    return t
