r"""CSR kernels of the sparse backend: sampled dense-dense products and sparse-dense products.

The allowed pairs of one attention problem form the sparsity pattern of a matrix :math:`A` (rows =
queries, columns = keys), kept once as integers shared by the heads (:class:`CSRPattern`: one CSR form and
one of its transpose for a mask shared by the batch, one per batch item for a batched mask). Each (item,
head) block is one call of PyTorch's CSR kernels (``torch.sparse.sampled_addmm`` and CSR @ dense) on 2-D
views of the operands where they lie (rows contiguous, any strides between them), with that head's values:

.. math::
    \mathrm{sampled}(X, Y)_{b,h,p} = \mathbf{x}_{b,h,\mathrm{row}(p)}^\top \mathbf{y}_{b,h,\mathrm{col}(p)},
    \qquad \mathrm{spmm}(a, Y)_{b,h,i} = \sum_{p : \mathrm{row}(p) = i} a_{h,p}\, \mathbf{y}_{b,h,\mathrm{col}(p)}

(and the transposed product :math:`A^\top Y`), results written in the memory order of the inputs.

Values (one per pair, head and batch item) are kept as one (H, V) tensor: V runs over the batch
items, each item's pairs in the pattern's order (for a mask shared by the batch, V = B * P and item
``b`` holds values ``b * P .. (b + 1) * P``), so ``values.t()`` is the (V, H) pair order of
:meth:`~attnmm.attention.forms.Forms.weight_pairs`.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.masks import Pairs

#: The memory orders of a (B, H, n, E) result: (B, H, n, E), (B, n, H, E) (token-major, the heads of a
#: token together) or (H, B, n, E) (heads first, as one fused call writes it).
Order = Literal["head", "token", "heads_first"]


@dataclass(frozen=True)
class CSRPattern:
    """The allowed pairs of one head, in CSR form and in the CSR form of the transpose, per item.

    An item is the whole batch for a mask shared by the batch (``items == 1``) and one batch item for a
    batched mask (``items == B``); item ``i`` owns pairs ``offsets[i] .. offsets[i + 1]``.

    Args:
        crow (Tensor): row pointer of each item, from 0 (items, L + 1).
        col (Tensor): key of each pair (P,), sorted by row, then key, within each item.
        crow_t (Tensor): row pointer of each item's transpose, from 0 (items, S + 1).
        col_t (Tensor): query of each pair of the transpose (P,), sorted by key, then query.
        perm (Tensor): value ``perm[t]`` of an item is value ``t`` of its transpose, within the item (P,).
        offsets (tuple[int, ...]): first pair of each item, and the total P (items + 1,).
        num_rows (int): queries per item L.
        num_cols (int): keys per item S.
        batched (bool): whether the pairs were given per batch item (a batched mask).
        fused (dict): the block-diagonal indices of the small problems computed over this pattern in one
            kernel call (:attr:`Blocks.fused`: at most :data:`FUSED_VALUES` values each, a few of them),
            kept with it so that such a problem, whose time is mostly calls' overhead, does not rebuild
            them at every call.
    """

    crow: Tensor
    col: Tensor
    crow_t: Tensor
    col_t: Tensor
    perm: Tensor
    offsets: tuple[int, ...]
    num_rows: int
    num_cols: int
    batched: bool
    fused: dict[tuple[Any, ...], tuple[Tensor, Tensor, Tensor | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def items(self) -> int:
        """Items with a pattern of their own: 1 for a mask shared by the batch, else B."""
        return len(self.offsets) - 1

    @property
    def nnz(self) -> int:
        """Pairs P over all items."""
        return self.offsets[-1]

    @property
    def nbytes(self) -> int:
        """Bytes held by the pattern's integers."""
        held = [self.crow, self.col, self.crow_t, self.col_t, self.perm]
        held += [t for index in self.fused.values() for t in index if t is not None]
        return sum(t.numel() * t.element_size() for t in held)

    @staticmethod
    def from_pairs(pairs: Pairs) -> CSRPattern:
        """The pattern of ``pairs``: one item when they are shared by the batch, one per batch item else."""
        L, S = pairs.num_rows, pairs.num_cols
        items = pairs.batch_size if pairs.batch is not None else 1
        assert items is not None
        row, col, device = pairs.row, pairs.col, pairs.row.device
        offsets: tuple[int, ...]
        if pairs.batch is None:
            offsets = (0, pairs.nnz)
            seg, seg_t = row, col
        else:
            per_item = torch.bincount(pairs.batch, minlength=items)
            offsets = (0, *(int(n) for n in per_item.cumsum(0).tolist()))
            seg, seg_t = pairs.batch * L + row, pairs.batch * S + col
        # 32-bit indices spare the CSR kernels a conversion (and halve the pattern)
        small = max(L, S, *(b - a for a, b in itertools.pairwise(offsets))) < 2**31
        idx = torch.int32 if small else torch.long
        deg = torch.bincount(seg, minlength=items * L).view(items, L)
        deg_t = torch.bincount(seg_t, minlength=items * S).view(items, S)
        # the transpose: the pairs sorted by (item, key), rows in order within a key (a stable sort)
        key = seg_t.to(torch.int32) if items * S < 2**31 else seg_t
        order = torch.sort(key, stable=True).indices  # (P,)
        if pairs.batch is None:
            perm = order
        else:
            first = torch.tensor(offsets[:-1], device=device)
            perm = order - first.index_select(0, pairs.batch.index_select(0, order))
        return CSRPattern(
            crow=F.pad(deg.cumsum(1), (1, 0)).to(idx),  # row pointers from 0, (items, L + 1)
            col=col.to(idx),
            crow_t=F.pad(deg_t.cumsum(1), (1, 0)).to(idx),
            col_t=row.index_select(0, order).to(idx),
            perm=perm.to(idx),
            offsets=offsets,
            num_rows=L,
            num_cols=S,
            batched=pairs.batch is not None,
        )

    def pairs(self) -> Pairs:
        """The pairs the pattern was made of (the inverse of :meth:`from_pairs`), O(P)."""
        L, device = self.num_rows, self.col.device
        deg = self.crow.diff(dim=1).long().view(-1)  # (items * L,)
        rows = torch.arange(L, device=device).repeat(self.items)
        row = torch.repeat_interleave(rows, deg, output_size=self.nnz)
        if not self.batched:
            return Pairs(row, self.col.long(), None, L, self.num_cols, None)
        per_item = torch.tensor([b - a for a, b in itertools.pairwise(self.offsets)], device=device)
        batch = torch.repeat_interleave(torch.arange(self.items, device=device), per_item, output_size=self.nnz)
        return Pairs(row, self.col.long(), batch, L, self.num_cols, self.items)

    def matrix(self, item: int, values: Tensor, transpose: bool = False) -> Tensor:
        """Item ``item``'s CSR matrix (L, S) with ``values`` in CSR order, or its transpose (S, L) with
        ``values`` in the transpose's order."""
        a, b = self.offsets[item], self.offsets[item + 1]
        if transpose:
            crow, col, size = self.crow_t[item], self.col_t[a:b], (self.num_cols, self.num_rows)
        else:
            crow, col, size = self.crow[item], self.col[a:b], (self.num_rows, self.num_cols)
        return _csr_tensor(crow, col, values, size)


@dataclass
class Blocks:
    """The (item, head) blocks of a problem of B batch items over a pattern: its flat rows (B * L) and
    their segments in the values (H, V), worked out once per call (O(B * L) integers).

    Attributes:
        pattern (CSRPattern): the pattern.
        batch (int): B.
        heads (int): H.
    """

    pattern: CSRPattern
    batch: int
    heads: int

    @property
    def width(self) -> int:
        """V, the values per head over the batch."""
        p = self.pattern
        return self.batch * p.nnz if p.items == 1 else p.nnz

    @cached_property
    def spans(self) -> list[tuple[int, int, int, int]]:
        """``(b, item, start, end)`` of every batch item: its pattern item and its values' range."""
        p = self.pattern
        if p.items == 1:  # a mask shared by the batch: item b's values follow item b - 1's
            return [(b, 0, b * p.nnz, (b + 1) * p.nnz) for b in range(self.batch)]
        return [(b, b, p.offsets[b], p.offsets[b + 1]) for b in range(self.batch)]

    @property
    def fused(self) -> bool:
        """Whether every block is computed in one kernel call, over a block-diagonal pattern of all
        heads and batch items (O(H * V) integers) rather than one call per block: for problems of many
        blocks and at most :data:`FUSED_VALUES` values, where each call's overhead (some microseconds)
        would outweigh the work. Large problems never repeat the pattern per head."""
        return self.batch * self.heads > 1 and self.heads * self.width <= FUSED_VALUES

    def fused_matrix(self, values: Tensor, num_rows: int, order: Order, transpose: bool) -> Tensor:
        """The block-diagonal CSR matrix of every (head, batch item) block with ``values`` (H, V): rows in
        (h, b, i) order (the order of ``values`` flattened), columns the rows of a flat operand of
        ``num_rows`` rows per block lying in ``order`` (:func:`_flat`); the transpose's when
        ``transpose`` (``values`` then permuted into its order). Its indices are kept with the pattern
        (:attr:`CSRPattern.fused`)."""
        key = (self.batch, self.heads, num_rows, order, transpose)
        kept = self.pattern.fused
        if key not in kept:
            if len(kept) >= FUSED_KEPT:
                kept.clear()
            kept[key] = self._fused_index(num_rows, order, transpose)
        crow, cols, perm = kept[key]
        if perm is not None:
            values = values.index_select(1, perm)
        H, B = self.heads, self.batch
        size = (crow.numel() - 1, B * H * num_rows)
        return _csr_tensor(crow, cols, values.reshape(-1), size)

    def _fused_index(self, num_rows: int, order: Order, transpose: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        p, B, H, V = self.pattern, self.batch, self.heads, self.width
        crow_local, col = (p.crow_t, p.col_t) if transpose else (p.crow, p.col)
        device, rows = col.device, crow_local.size(1) - 1
        b, h = torch.arange(B, device=device).view(-1, 1), torch.arange(H, device=device).view(1, -1)
        # the first row of block (b, h) of the flat operand (B, H), and the step between its rows
        if order == "token":
            first, step = b * (num_rows * H) + h, H
        elif order == "heads_first":
            first, step = (h * B + b) * num_rows, 1
        else:
            first, step = (b * H + h) * num_rows, 1
        b, h = b.view(-1), h.view(-1)
        start = torch.tensor([s for _, _, s, _ in self.spans], device=device)  # (B,) first value of each item
        items = b if p.items > 1 else torch.zeros_like(b)
        crow = crow_local.long().index_select(0, items)[:, :-1] + start.view(-1, 1)  # (B, rows)
        crow = crow.view(1, B, rows) + V * h.view(-1, 1, 1)  # (H, B, rows)
        idx = torch.int32 if max(H * V, B * H * num_rows) < 2**31 else torch.long
        crow = torch.cat([crow.reshape(-1), crow.new_full((1,), H * V)]).to(idx)
        if p.items == 1:
            cols = first.t().unsqueeze(-1) + step * col.long().view(1, 1, -1)  # (H, B, P)
            batch = None
        else:
            sizes = torch.tensor([e - a for a, e in itertools.pairwise(p.offsets)], device=device)
            batch = torch.repeat_interleave(b, sizes, output_size=p.nnz)  # batch item of each value (V,)
            cols = first.t().index_select(1, batch) + step * col.long().view(1, -1)  # (H, V)
        perm = None
        if transpose:
            perm = p.perm.long()
            if batch is None:
                perm = (perm.view(1, -1) + start.view(-1, 1)).view(-1)  # (V,)
            else:
                perm = perm + start.index_select(0, batch)
        return crow, cols.reshape(-1).to(idx), perm

    def one_head(self) -> Blocks:
        """These blocks for a problem of one head (what a loop over the heads computes each time),
        sharing the per-row integers worked out so far."""
        one = Blocks(self.pattern, self.batch, 1)
        # (the cached properties, which do not depend on H)
        for name in ("spans", "row_offsets", "counts", "value_rows"):
            if name in self.__dict__:
                one.__dict__[name] = self.__dict__[name]
        return one

    @cached_property
    def row_offsets(self) -> Tensor:
        """Offsets of each flat row's values in V (B * L + 1,), int64: the segments of the reductions."""
        p = self.pattern
        crow = p.crow.long()  # (items, L + 1)
        if p.items == 1 and self.batch == 1:
            return crow[0]
        first = torch.tensor([s for _, _, s, _ in self.spans], device=crow.device).view(-1, 1)  # (B, 1)
        starts = crow[:, :-1] + first  # (B, L): a pattern shared by the batch (one item) broadcasts
        return torch.cat([starts.reshape(-1), crow.new_full((1,), self.width)])

    @cached_property
    def counts(self) -> Tensor:
        """Values of each flat row (B * L,), int64."""
        return self.row_offsets.diff()

    @cached_property
    def value_rows(self) -> Tensor:
        """The flat row of each value (V,), 32-bit where the rows allow: the index that spreads a value
        per row over the row's values (:func:`expand`), made once per call, not at each use."""
        counts = self.counts
        rows = counts.numel()
        index = torch.arange(rows, device=counts.device, dtype=torch.int32 if rows < 2**31 else torch.long)
        return index.repeat_interleave(counts, output_size=self.width)


#: Values (over all heads and batch items) up to which the blocks of a problem run as one kernel call.
FUSED_VALUES = 1 << 18

#: How many such block-diagonal indices a pattern keeps (problems of other batch sizes or head counts).
FUSED_KEPT = 4


def _block(t: Tensor, b: int, h: int) -> Tensor:
    """The 2-D block (n, E) of batch item ``b`` and head ``h`` of ``t`` (B, H, n, E), contiguous: a view
    when it is, else a copy (the kernels read a strided block slower than a copy of it costs: measured
    2.4x for ``sampled_addmm`` and 1.4x for ``addmm`` at n = 100k, E = 64 with its rows 4 heads apart)."""
    block = t[b, h]
    return block if head_major(block.view(1, 1, *block.shape)) else block.contiguous()


def head_major(t: Tensor) -> bool:
    """Whether every (b, h) block of ``t`` (B, H, n, E) is a contiguous matrix (n, E): what the CSR kernels
    take without a copy (the blocks need not follow each other: a slice of the rows of a longer
    sequence qualifies)."""
    n, E = t.size(2), t.size(3)
    return (E <= 1 or t.stride(3) == 1) and (n <= 1 or t.stride(2) == E)


def _flat(t: Tensor) -> tuple[Tensor, Order]:
    """``t`` (B, H, n, E) as one matrix of rows without a copy where its memory allows, and the order of
    its rows: (b, h, i) (``"head"``, a copy unless it lies so), (b, i, h) (``"token"``) or (h, b, i)
    (``"heads_first"``)."""
    if t.is_contiguous():
        return t.reshape(-1, t.size(-1)), "head"
    if t.transpose(1, 2).is_contiguous():
        return t.transpose(1, 2).reshape(-1, t.size(-1)), "token"
    if t.transpose(0, 1).is_contiguous():
        return t.transpose(0, 1).reshape(-1, t.size(-1)), "heads_first"
    return t.reshape(-1, t.size(-1)), "head"


def _csr_tensor(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A CSR matrix, unchecked (the pattern is valid by construction)."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def result_order(blocks: Blocks, y: Tensor) -> Order:
    """The memory order :func:`spmm` writes its result in, for the operand ``y``: heads first when fused
    (:attr:`Blocks.fused`), token-major when ``y`` is (so its consumer, which gave it so, gets it so),
    else head-major."""
    if blocks.fused:
        return "heads_first"
    return "token" if not head_major(y) and y.transpose(1, 2).is_contiguous() else "head"


def as_heads_second(t: Tensor, order: Order) -> Tensor:
    """A result of :func:`spmm` in ``order`` as (B, H, n, E) (a view)."""
    if order == "token":
        return t.transpose(1, 2)
    return t.transpose(0, 1) if order == "heads_first" else t


def sampled(blocks: Blocks, x: Tensor, y: Tensor) -> Tensor:
    r""":math:`x_{b,h,\mathrm{row}(p)} \cdot y_{b,h,\mathrm{col}(p)}` of each pair: x (B, H, L, E),
    y (B, H, S, E) -> values (H, V)."""
    p, B, H = blocks.pattern, blocks.batch, blocks.heads
    if x.size(-1) == 0 or blocks.width == 0 or H == 0:
        return x.new_zeros(H, blocks.width)
    if blocks.fused:
        # one call: the rows of x in the fused matrix's (h, b, i) order (a copy unless x lies so), the
        # columns read from y where it lies
        rows = x.transpose(0, 1).reshape(H * B * x.size(2), x.size(-1))
        flat, order = _flat(y)
        template = blocks.fused_matrix(x.new_zeros(H, blocks.width), y.size(2), order, False)
        return torch.sparse.sampled_addmm(template, rows, flat.t(), beta=0.0).values().view(H, -1)
    # zeros: the kernel scales what it writes over by beta = 0, so it must hold no NaN
    out = x.new_zeros(H, blocks.width)
    for b, item, start, end in blocks.spans:
        if start == end:
            continue
        for h in range(H):
            template = p.matrix(item, out[h, start:end])
            torch.sparse.sampled_addmm(template, _block(x, b, h), _block(y, b, h).t(), beta=0.0, out=template)
    return out


def spmm(
    blocks: Blocks, values: Tensor, y: Tensor, transpose: bool = False, into: Tensor | None = None, add: bool = False,
    alpha: float = 1.0,
) -> tuple[Tensor, Order]:
    r""":math:`A y` (or :math:`A^\top y`) of every block: values (H, V), y (B, H, S, E) -> (B, H, L, E)
    (the other way round for the transpose), returned as the tensor it is written in and its memory
    order (:func:`result_order`; :func:`as_heads_second` gives the (B, H, L, E) view).

    With ``into``, a (B, H, L, E) tensor whose rows are contiguous (a view of a larger one, such as a
    head or a query segment of a whole gradient), the result is written there, or added to what it
    holds when ``add``, and ``into`` comes back (order ``"head"``): no result of its own is made. The
    product is scaled by ``alpha`` (a factor of the values, applied by the kernel rather than to them)."""
    p, B, H = blocks.pattern, blocks.batch, blocks.heads
    rows, E = (p.num_cols if transpose else p.num_rows), y.size(-1)
    if into is not None and blocks.fused:  # one kernel call writes its own layout: made, then moved in
        out = as_heads_second(*spmm(blocks, values, y, transpose, alpha=alpha))
        into.add_(out) if add else into.copy_(out)
        return into, "head"
    order: Order = "head" if into is not None else result_order(blocks, y)
    if into is not None:
        out = into
    else:
        shape = {"head": (B, H, rows, E), "token": (B, rows, H, E), "heads_first": (H, B, rows, E)}[order]
        if E == 0 or blocks.width == 0 or H == 0 or rows == 0:
            return y.new_zeros(shape), order
        out = y.new_empty(shape)
    if E == 0 or H == 0 or rows == 0:
        return out, order
    if order == "heads_first":
        flat, flat_order = _flat(y)
        matrix = blocks.fused_matrix(values, y.size(2), flat_order, transpose)
        # addmm into the output with beta = 0 skips the zero-fill and copy of a plain ``A @ y``
        target = out.view(H * B * rows, E)
        torch.addmm(target, matrix, flat, beta=0.0, alpha=alpha, out=target)
        return out, order
    view = as_heads_second(out, order)
    for b, item, start, end in blocks.spans:
        if start == end:
            if not add:
                view[b].zero_()
            continue
        for h in range(H):
            vals = values[h, start:end]
            if transpose:  # (in the order of the transpose)
                vals = vals.index_select(0, p.perm[p.offsets[item] : p.offsets[item + 1]])
            target = view[b, h]  # (one object as input and output: addmm then skips copying it onto itself)
            matrix = p.matrix(item, vals, transpose)
            torch.addmm(target, matrix, _block(y, b, h), beta=1.0 if add else 0.0, alpha=alpha, out=target)
    return out, order


def segment_max(blocks: Blocks, values: Tensor) -> Tensor:
    """Maximum of each flat row's values: (H, V) -> (H, B * L); empty rows give 0."""
    offsets = blocks.row_offsets.expand(values.size(0), -1)
    out = torch.segment_reduce(values, "max", offsets=offsets, axis=1, unsafe=True)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def segment_sum(blocks: Blocks, values: Tensor) -> Tensor:
    """Sum of each flat row's values: (H, V) -> (H, B * L); empty rows give 0."""
    offsets = blocks.row_offsets.expand(values.size(0), -1)
    return torch.segment_reduce(values, "sum", offsets=offsets, axis=1, unsafe=True)


def expand(blocks: Blocks, per_row: Tensor) -> Tensor:
    """A value per flat row (H, B * L) repeated for each of its values -> (H, V)."""
    return per_row.index_select(1, blocks.value_rows)
