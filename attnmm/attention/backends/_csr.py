r"""CSR kernels of the sparse backend: sampled dense-dense products and sparse-dense products.

The allowed pairs of one attention problem form the sparsity pattern of a matrix :math:`A`
(rows = queries, columns = keys). With per-head dense operands :math:`X` (H, R, E) and
:math:`Y` (H, C, E), the kernels compute, per head,

.. math::
    \mathrm{sampled}(X, Y)_p = \mathbf{x}_{\mathrm{row}(p)}^\top \mathbf{y}_{\mathrm{col}(p)},
    \qquad \mathrm{spmm}(a, Y)_i = \sum_{p : \mathrm{row}(p) = i} a_p \mathbf{y}_{\mathrm{col}(p)}

(and the transposed product :math:`A^\top Y`) with PyTorch's CSR kernels
(``torch.sparse.sampled_addmm`` and CSR @ dense), so no per-pair copy of the operands, an
(nnz, H, E) tensor, is ever made.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from attnmm.masks import Pairs


@dataclass(frozen=True)
class CSRPattern:
    """The sparsity pattern of the allowed pairs, in CSR form and in the CSR form of its transpose.

    Args:
        crow (LongTensor): row pointer (R + 1,).
        col (LongTensor): column of each pair (P,), sorted within each row.
        row (LongTensor): row of each pair (P,).
        crow_t (LongTensor): row pointer of the transpose (C + 1,).
        col_t (LongTensor): column (= original row) of each pair of the transpose (P,).
        perm (LongTensor): pair ``perm[q]`` of the original is pair ``q`` of the transpose (P,).
        num_rows (int): R.
        num_cols (int): C.
    """

    crow: Tensor
    col: Tensor
    row: Tensor
    crow_t: Tensor
    col_t: Tensor
    perm: Tensor
    num_rows: int
    num_cols: int

    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @staticmethod
    def block_diagonal(pairs: Pairs, num_batches: int) -> CSRPattern:
        """The pattern of every batch item side by side, block-diagonally: row ``b * L + i``,
        column ``b * S + j`` (``pairs`` must already be expanded over the batch when B > 1)."""
        L, S = pairs.num_rows, pairs.num_cols
        if pairs.batch is None:
            row, col = pairs.row, pairs.col
        else:
            row, col = pairs.batch * L + pairs.row, pairs.batch * S + pairs.col
        R, C = num_batches * L, num_batches * S
        crow = _pointer(row, R)
        perm = torch.argsort(col * max(R, 1) + row)  # sort by (column, row)
        return CSRPattern(crow, col, row, _pointer(col, C), row[perm], perm, R, C)

    def matrix(self, values: Tensor, transpose: bool = False) -> Tensor:
        """The sparse CSR matrix (R, C) with ``values`` (P,) in pair order, or its transpose (C, R)."""
        if transpose:
            crow, col, values, size = self.crow_t, self.col_t, values[self.perm], (self.num_cols, self.num_rows)
        else:
            crow, col, size = self.crow, self.col, (self.num_rows, self.num_cols)
        with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _pointer(index: Tensor, size: int) -> Tensor:
    counts = torch.bincount(index, minlength=size)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


def sampled(pattern: CSRPattern, x: Tensor, y: Tensor) -> Tensor:
    r"""Per-head :math:`x_{\mathrm{row}(p)} \cdot y_{\mathrm{col}(p)}`: x (H, R, E), y (H, C, E) -> (H, P)."""
    H = x.size(0)
    out = x.new_empty(H, pattern.nnz)
    if pattern.nnz == 0:
        return out
    zeros = x.new_zeros(pattern.nnz)
    template = pattern.matrix(zeros)
    for h in range(H):
        res = torch.sparse.sampled_addmm(template, x[h], y[h].transpose(0, 1), beta=0.0)
        out[h] = res.values()
    return out


def spmm(pattern: CSRPattern, values: Tensor, y: Tensor, transpose: bool = False) -> Tensor:
    r"""Per-head :math:`A y` (or :math:`A^\top y`): values (H, P), y (H, C, E) -> (H, R, E)."""
    H = values.size(0)
    rows = pattern.num_cols if transpose else pattern.num_rows
    if pattern.nnz == 0:
        return y.new_zeros(H, rows, y.size(-1))
    return torch.stack([pattern.matrix(values[h], transpose) @ y[h] for h in range(H)])


def segment_max(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Row-wise maximum of values (H, P) -> (H, R); empty rows give 0."""
    offsets = pattern.crow.expand(values.size(0), -1)
    out = torch.segment_reduce(values, "max", offsets=offsets, axis=1, unsafe=True)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def segment_sum(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Row-wise sum of values (H, P) -> (H, R); empty rows give 0."""
    offsets = pattern.crow.expand(values.size(0), -1)
    return torch.segment_reduce(values, "sum", offsets=offsets, axis=1, unsafe=True)
