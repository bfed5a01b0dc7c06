r"""CSR kernels of the sparse backend: sampled dense-dense products and sparse-dense products.

The allowed pairs of one attention problem form the sparsity pattern of a matrix :math:`A`
(rows = queries, columns = keys). Every head and batch item gets its own copy of the pattern in one
big block matrix over the flattened operands, so with the queries flattened to :math:`X` (H * R, E)
and the keys to :math:`Y` (H * C, E) one kernel call computes

.. math::
    \mathrm{sampled}(X, Y)_p = \mathbf{x}_{\mathrm{row}(p)}^\top \mathbf{y}_{\mathrm{col}(p)},
    \qquad \mathrm{spmm}(a, Y)_i = \sum_{p : \mathrm{row}(p) = i} a_p \mathbf{y}_{\mathrm{col}(p)}

(and the transposed product :math:`A^\top Y`) with PyTorch's CSR kernels
(``torch.sparse.sampled_addmm`` and CSR @ dense). No per-pair copy of the operands, an
(nnz, H, E) tensor, is ever made; the pattern itself costs O(nnz * H) integers.

Two orders of the flattened operands are supported, so that the caller's tensors are used as they
lie in memory:

- ``"head"``: row ``h * R + r``, the operands are (H, R, E) contiguous (heads stacked);
- ``"token"``: row ``r * H + h``, the operands are (R, H, E) contiguous, the layout of PyG's
  (N, H, E) node features. The heads of one token are neighbours in memory, so the random reads of a
  graph touch each key's cache lines once for all heads.

Values (one per pair and head) are kept flat, (H * P,), in the CSR order of the flat rows;
:func:`to_pairs` and :func:`from_pairs` convert from and to the (P, H) pair order of the mask.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import torch
from torch import Tensor

from attnmm.masks import Pairs

Layout = Literal["head", "token"]


@dataclass(frozen=True)
class CSRPattern:
    """The allowed pairs of every head, in CSR form and in the CSR form of the transpose.

    Args:
        row (LongTensor): row of each pair of one head (P,), in ``[0, R)``, sorted.
        crow (Tensor): row pointer over the flat rows (H * R + 1,).
        col (Tensor): flat column of each value (H * P,), sorted within each flat row.
        crow_t (Tensor): row pointer of the transpose (H * C + 1,).
        col_t (Tensor): flat column (= original flat row) of each value of the transpose (H * P,).
        perm (LongTensor): value ``perm[t]`` of the original is value ``t`` of the transpose (H * P,).
        counts (LongTensor): values per flat row (H * R,).
        heads (int): H.
        num_rows (int): rows per head R.
        num_cols (int): columns per head C.
        layout (str): ``"head"`` or ``"token"``, the order of the flat rows and columns.
    """

    row: Tensor
    crow: Tensor
    col: Tensor
    crow_t: Tensor
    col_t: Tensor
    perm: Tensor
    counts: Tensor
    heads: int
    num_rows: int
    num_cols: int
    layout: Layout = "head"

    @property
    def nnz(self) -> int:
        """Pairs per head P."""
        return int(self.row.numel())

    @staticmethod
    def block_diagonal(pairs: Pairs, num_batches: int, heads: int, layout: Layout = "head") -> CSRPattern:
        """The pattern of every head and batch item (``pairs`` must already be expanded over the
        batch when B > 1), in ``layout`` order."""
        if layout not in ("head", "token"):
            raise ValueError(f"layout must be 'head' or 'token', got {layout!r}")
        L, S = pairs.num_rows, pairs.num_cols
        if pairs.batch is None:
            row, col = pairs.row, pairs.col
        else:
            row, col = pairs.batch * L + pairs.row, pairs.batch * S + pairs.col
        H, R, C, P = heads, num_batches * L, num_batches * S, row.numel()
        small = H * max(R, C, P) < 2**31  # 32-bit indices spare the CSR kernels a conversion
        idx = torch.int32 if small else torch.long
        order = torch.argsort(col * max(R, 1) + row)  # the pairs sorted by (column, row): the transpose
        deg, deg_t = torch.bincount(row, minlength=R), torch.bincount(col, minlength=C)
        start, start_t = deg.cumsum(0) - deg, deg_t.cumsum(0) - deg_t
        h = torch.arange(H, device=row.device)
        end = row.new_full((1,), H * P)
        if layout == "head":  # flat row h * R + r; value h * P + p
            crow = torch.cat([(start.view(1, -1) + h.view(-1, 1) * P).view(-1), end])
            crow_t = torch.cat([(start_t.view(1, -1) + h.view(-1, 1) * P).view(-1), end])
            col_flat = (col.view(1, -1) + h.view(-1, 1) * C).to(idx).view(-1)
            col_t = (row[order].view(1, -1) + h.view(-1, 1) * R).to(idx).view(-1)
            perm = (order.view(1, -1) + h.view(-1, 1) * P).view(-1)
            counts = deg.repeat(H)
        else:  # flat row r * H + h; the values of token r's heads one after the other
            crow = torch.cat([(H * start.view(-1, 1) + h.view(1, -1) * deg.view(-1, 1)).view(-1), end])
            crow_t = torch.cat([(H * start_t.view(-1, 1) + h.view(1, -1) * deg_t.view(-1, 1)).view(-1), end])
            pos = _token_positions(row, start, deg, H).view(-1)  # (P * H,)
            col_flat = torch.empty(H * P, dtype=idx, device=row.device)
            col_flat[pos] = (col.view(-1, 1) * H + h).to(idx).view(-1)
            col_t_rows = col[order]
            pos_t = _token_positions(col_t_rows, start_t, deg_t, H).view(-1)
            col_t = torch.empty(H * P, dtype=idx, device=row.device)
            col_t[pos_t] = (row[order].view(-1, 1) * H + h).to(idx).view(-1)
            perm = torch.empty(H * P, dtype=torch.long, device=row.device)
            perm[pos_t] = pos.view(P, H)[order].view(-1)
            counts = deg.repeat_interleave(H)
        return CSRPattern(
            row=row,
            crow=crow.to(idx),
            col=col_flat,
            crow_t=crow_t.to(idx),
            col_t=col_t,
            perm=perm,
            counts=counts,
            heads=H,
            num_rows=R,
            num_cols=C,
            layout=layout,
        )

    @cached_property
    def offsets(self) -> Tensor:
        """The row pointer as int64, the offsets of the segment reductions (H * R + 1,)."""
        return self.crow.long()

    @cached_property
    def pair_positions(self) -> Tensor:
        """Flat value index of pair p and head h (P, H); for the ``"token"`` layout only."""
        deg = torch.bincount(self.row, minlength=self.num_rows)
        return _token_positions(self.row, deg.cumsum(0) - deg, deg, self.heads).to(self.col.dtype)

    @cached_property
    def pair_order(self) -> Tensor:
        """For each flat value, its index in the flattened (P, H) pair order (H * P,); ``"token"`` only."""
        out = torch.empty(self.heads * self.nnz, dtype=torch.long, device=self.row.device)
        out[self.pair_positions.view(-1).long()] = torch.arange(out.numel(), device=out.device)
        return out.to(self.col.dtype)

    def matrix(self, values: Tensor, transpose: bool = False) -> Tensor:
        """The CSR matrix (H * R, H * C) with ``values`` (H * P,) in CSR order, or its transpose
        (H * C, H * R)."""
        H = self.heads
        if transpose:
            crow, col, size = self.crow_t, self.col_t, (H * self.num_cols, H * self.num_rows)
            values = values.index_select(0, self.perm)
        else:
            crow, col, size = self.crow, self.col, (H * self.num_rows, H * self.num_cols)
        with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _token_positions(row: Tensor, start: Tensor, deg: Tensor, heads: int) -> Tensor:
    """Flat value index (P, H) of each (sorted) pair and head in the ``"token"`` layout: the values of
    flat row ``r * H + h`` start at ``H * start[r] + h * deg[r]``."""
    first, n = start.index_select(0, row), deg.index_select(0, row)  # (P,)
    within = torch.arange(row.numel(), device=row.device) - first
    h = torch.arange(heads, device=row.device)
    return (heads * first + within).view(-1, 1) + h.view(1, -1) * n.view(-1, 1)


def to_pairs(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Flat values (H * P,) in CSR order -> (P, H) in pair order."""
    H, P = pattern.heads, pattern.nnz
    if pattern.layout == "head":
        return values.view(H, P).transpose(0, 1)
    return values.index_select(0, pattern.pair_positions.view(-1)).view(P, H)


def from_pairs(pattern: CSRPattern, values: Tensor) -> Tensor:
    """(P, H) values in pair order -> flat (H * P,) in CSR order."""
    if pattern.layout == "head":
        return values.transpose(0, 1).reshape(-1)
    return values.reshape(-1).index_select(0, pattern.pair_order)


def sampled(pattern: CSRPattern, x: Tensor, y: Tensor) -> Tensor:
    r""":math:`x_{\mathrm{row}(v)} \cdot y_{\mathrm{col}(v)}` of each value: x (H * R, E), y (H * C, E) -> (H * P,)."""
    n = pattern.heads * pattern.nnz
    if n == 0:
        return x.new_zeros(0)
    template = pattern.matrix(x.new_zeros(n))
    return torch.sparse.sampled_addmm(template, x, y.transpose(0, 1), beta=0.0).values()


def spmm(pattern: CSRPattern, values: Tensor, y: Tensor, transpose: bool = False) -> Tensor:
    r""":math:`A y` (or :math:`A^\top y`): values (H * P,), y (H * C, E) -> (H * R, E) (the other way
    round for the transpose)."""
    H = pattern.heads
    rows = H * (pattern.num_cols if transpose else pattern.num_rows)
    if pattern.nnz == 0:
        return y.new_zeros(rows, y.size(-1))
    # addmm into a fresh buffer with beta = 0 skips the zero-fill and copy of a plain ``A @ y``
    out = y.new_empty(rows, y.size(-1))
    torch.addmm(out, pattern.matrix(values, transpose), y, beta=0.0, out=out)
    return out


def segment_max(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Maximum of each flat row's values (H * P,) -> (H * R,); empty rows give 0."""
    out = torch.segment_reduce(values, "max", offsets=pattern.offsets, unsafe=True)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def segment_sum(pattern: CSRPattern, values: Tensor) -> Tensor:
    """Sum of each flat row's values (H * P,) -> (H * R,); empty rows give 0."""
    return torch.segment_reduce(values, "sum", offsets=pattern.offsets, unsafe=True)


def expand(pattern: CSRPattern, per_row: Tensor) -> Tensor:
    """A value per flat row (H * R,) repeated for each of its values -> (H * P,)."""
    return per_row.repeat_interleave(pattern.counts, output_size=pattern.heads * pattern.nnz)
