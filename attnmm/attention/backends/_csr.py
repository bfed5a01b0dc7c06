r"""CSR kernels of the sparse backend: sampled dense-dense products and sparse-dense products.

The allowed pairs of one attention problem form the sparsity pattern of a matrix :math:`A`
(rows = queries, columns = keys). Heads and batch items are laid side by side as one
block-diagonal matrix (row ``(h * B + b) * L + i``, column ``(h * B + b) * S + j``), so with the
dense operands flattened to :math:`X` (H * R, E) and :math:`Y` (H * C, E) one kernel call computes

.. math::
    \mathrm{sampled}(X, Y)_p = \mathbf{x}_{\mathrm{row}(p)}^\top \mathbf{y}_{\mathrm{col}(p)},
    \qquad \mathrm{spmm}(a, Y)_i = \sum_{p : \mathrm{row}(p) = i} a_p \mathbf{y}_{\mathrm{col}(p)}

(and the transposed product :math:`A^\top Y`) with PyTorch's CSR kernels
(``torch.sparse.sampled_addmm`` and CSR @ dense). No per-pair copy of the operands, an
(nnz, H, E) tensor, is ever made; the pattern itself costs O(nnz * H) integers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from attnmm.masks import Pairs


@dataclass(frozen=True)
class CSRPattern:
    """The allowed pairs of every head, in CSR form and in the CSR form of the transpose.

    Args:
        row (LongTensor): row of each pair of one head (P,), in ``[0, R)``.
        crow (LongTensor): row pointer over all heads (H * R + 1,).
        col (IntTensor): column of each pair over all heads (H * P,), sorted within each row.
        crow_t (IntTensor): row pointer of the transpose (H * C + 1,).
        col_t (IntTensor): column (= original row) of each pair of the transpose (H * P,).
        perm (LongTensor): pair ``perm[t]`` of the original is pair ``t`` of the transpose (H * P,).
        heads (int): H.
        num_rows (int): rows per head R.
        num_cols (int): columns per head C.
    """

    row: Tensor
    crow: Tensor
    col: Tensor
    crow_t: Tensor
    col_t: Tensor
    perm: Tensor
    heads: int
    num_rows: int
    num_cols: int

    @property
    def nnz(self) -> int:
        """Pairs per head P."""
        return int(self.row.numel())

    @staticmethod
    def block_diagonal(pairs: Pairs, num_batches: int, heads: int) -> CSRPattern:
        """The pattern of every head and batch item side by side, block-diagonally (``pairs`` must
        already be expanded over the batch when B > 1)."""
        L, S = pairs.num_rows, pairs.num_cols
        if pairs.batch is None:
            row, col = pairs.row, pairs.col
        else:
            row, col = pairs.batch * L + pairs.row, pairs.batch * S + pairs.col
        R, C, P = num_batches * L, num_batches * S, row.numel()
        small = heads * max(R, C, P) < 2**31  # 32-bit indices spare the CSR kernels a conversion
        idx = torch.int32 if small else torch.long
        perm = torch.argsort(col * max(R, 1) + row)  # one head's pairs sorted by (column, row)
        h = torch.arange(heads, device=row.device).view(-1, 1)  # (H, 1)
        return CSRPattern(
            row=row,
            crow=_pointer(row, R, heads, P),
            col=(col.to(idx) + (h * C).to(idx)).view(-1),
            crow_t=_pointer(col, C, heads, P).to(idx),
            col_t=(row[perm].to(idx) + (h * R).to(idx)).view(-1),
            perm=(perm + h * P).view(-1),
            heads=heads,
            num_rows=R,
            num_cols=C,
        )

    def matrix(self, values: Tensor, transpose: bool = False) -> Tensor:
        """The block-diagonal CSR matrix (H * R, H * C) with ``values`` (H * P,) in pair order, or
        its transpose (H * C, H * R)."""
        H = self.heads
        if transpose:
            crow, col, size = self.crow_t, self.col_t, (H * self.num_cols, H * self.num_rows)
            values = values.index_select(0, self.perm)
        else:
            crow, col, size = self.crow.to(self.col.dtype), self.col, (H * self.num_rows, H * self.num_cols)
        with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _pointer(index: Tensor, size: int, heads: int, per_head: int) -> Tensor:
    """Row pointer (heads * size + 1,) of ``heads`` copies of one sorted row index."""
    counts = torch.bincount(index, minlength=size)
    starts = counts.cumsum(0) - counts  # (size,)
    shift = torch.arange(heads, device=index.device).view(-1, 1) * per_head
    return torch.cat([(starts + shift).view(-1), counts.new_full((1,), heads * per_head)])


def sampled(pattern: CSRPattern, x: Tensor, y: Tensor) -> Tensor:
    r"""Per-head :math:`x_{\mathrm{row}(p)} \cdot y_{\mathrm{col}(p)}`: x (H, R, E), y (H, C, E) -> (H, P)."""
    H, P = pattern.heads, pattern.nnz
    if P == 0:
        return x.new_zeros(H, 0)
    template = pattern.matrix(x.new_zeros(H * P))
    x2, y2 = x.reshape(H * pattern.num_rows, -1), y.reshape(H * pattern.num_cols, -1)
    return torch.sparse.sampled_addmm(template, x2, y2.transpose(0, 1), beta=0.0).values().view(H, P)


def spmm(pattern: CSRPattern, values: Tensor, y: Tensor, transpose: bool = False) -> Tensor:
    r"""Per-head :math:`A y` (or :math:`A^\top y`): values (H, P), y (H, C, E) -> (H, R, E)."""
    H = pattern.heads
    rows = pattern.num_cols if transpose else pattern.num_rows
    cols = pattern.num_rows if transpose else pattern.num_cols
    if pattern.nnz == 0:
        return y.new_zeros(H, rows, y.size(-1))
    # addmm into a fresh buffer with beta = 0 skips the zero-fill and copy of a plain ``A @ y``
    out = y.new_empty(H * rows, y.size(-1))
    torch.addmm(out, pattern.matrix(values.reshape(-1), transpose), y.reshape(H * cols, -1), beta=0.0, out=out)
    return out.view(H, rows, -1)


def segment_max(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Row-wise maximum of values (H, P) -> (H, R); empty rows give 0."""
    out = torch.segment_reduce(values.reshape(-1), "max", offsets=pattern.crow, unsafe=True)
    out = torch.where(torch.isfinite(out), out, torch.zeros_like(out))
    return out.view(pattern.heads, pattern.num_rows)


def segment_sum(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Row-wise sum of values (H, P) -> (H, R); empty rows give 0."""
    out = torch.segment_reduce(values.reshape(-1), "sum", offsets=pattern.crow, unsafe=True)
    return out.view(pattern.heads, pattern.num_rows)
