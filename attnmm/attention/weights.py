"""Attention weights in sparse form, as returned by ``attend(..., return_weights=True)``."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class AttentionWeights(NamedTuple):
    r"""Weights :math:`a_{ij}` at the allowed pairs, sorted by (batch, row, col).

    Attributes:
        batch (LongTensor, optional): batch item of each pair (P,); ``None`` in the packed layout.
        row (LongTensor): query index i (P,).
        col (LongTensor): key index j (P,).
        values (Tensor): weights (P, H).
    """

    batch: Tensor | None
    row: Tensor
    col: Tensor
    values: Tensor

    @property
    def edge_index(self) -> Tensor:
        """PyG-style (2, P) index of the pairs: row 0 the key (source), row 1 the query (target)."""
        return torch.stack([self.col, self.row])

    def to_dense(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> Tensor:
        """Dense weights (H, L, S), or (B, H, L, S) when ``batch`` is set."""
        lead: tuple[int, ...] = ()
        if self.batch is not None:
            lead = (batch_size if batch_size is not None else int(self.batch.max()) + 1 if self.batch.numel() else 0,)
        out = self.values.new_zeros(*lead, num_rows, num_cols, self.values.size(-1))  # ([B,] L, S, H)
        out[(self.row, self.col) if self.batch is None else (self.batch, self.row, self.col)] = self.values
        return out.movedim(-1, -3)
