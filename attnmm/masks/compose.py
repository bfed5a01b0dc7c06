r"""Composition of masks: intersection ``&``, union ``|`` and complement ``~``."""

from __future__ import annotations

from functools import reduce
from operator import and_
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import Tensor

from attnmm.masks._pairs import Pairs, pairs_from_keys
from attnmm.masks.base import IntervalMask, Mask, Structure
from attnmm.masks.causal import Causal
from attnmm.masks.full import Full

if TYPE_CHECKING:
    from attnmm.masks.segments import Segments


def _layout(parts: tuple[Mask, ...], op: str) -> str | None:
    layouts = {p.layout for p in parts if p.layout is not None}
    if len(layouts) > 1:
        raise TypeError(
            f"cannot compose masks of different layouts with {op!r}: "
            + ", ".join(f"{p!r} is {p.layout}" for p in parts if p.layout is not None)
            + " (Graph masks use the packed node layout; Padding and Grid the padded (B, H, L, E) one)"
        )
    return layouts.pop() if layouts else None


def _batch_size(parts: tuple[Mask, ...]) -> int | None:
    sizes = {p.batch_size for p in parts if p.batch_size is not None}
    if len(sizes) > 1:
        raise ValueError(f"cannot compose batched masks built for different batch sizes: {sorted(sizes)}")
    return sizes.pop() if sizes else None


def _part_bound(part: Mask, num_rows: int, num_cols: int, batch_size: int | None) -> int | None:
    """``part.nnz_bound`` over the whole batch: an unbatched part counts once per batch item."""
    bound = part.nnz_bound(num_rows, num_cols, batch_size if part.batched else None)
    if bound is None or part.batched or batch_size is None:
        return bound
    return bound * batch_size


def _wrap(m: Mask, parent: type) -> str:
    return f"({m!r})" if isinstance(m, (And, Or, Intersection)) and not isinstance(m, parent) else repr(m)


class _Composite(Mask):
    def __init__(self, parts: tuple[Mask, ...], op: str) -> None:
        self.parts = parts
        self.layout = _layout(parts, op)  # type: ignore[assignment]
        self.batched = any(p.batched for p in parts)
        self._batch_size = _batch_size(parts)
        self._op = op

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        for p in self.parts:
            p.check(num_rows, num_cols, batch_size)

    def __repr__(self) -> str:
        return f" {self._op} ".join(_wrap(p, type(self)) for p in self.parts)

    @property
    def block_sizes(self) -> frozenset[int]:
        return frozenset().union(*(p.block_sizes for p in self.parts))

    @property
    def grid_size(self) -> tuple[int, int] | None:
        return next((g for p in self.parts if (g := p.grid_size) is not None), None)


def _not_full(parts: tuple[Mask, ...]) -> list[Mask]:
    return [p for p in parts if p.structure.kind != "full" or p.batched]


class _Meet(_Composite):
    """What an intersection answers from its parts: a key must be allowed by every part."""

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return reduce(and_, (p.shifted(q_offset, kv_offset) for p in self.parts))

    def as_blocks(self, num_rows: int, num_cols: int) -> Segments | None:
        """The blocks of the one part made of blocks, each intersected with the other parts seen from
        the block's offsets (``Documents(lengths) & Causal()``: each document causal on its own)."""
        for i, part in enumerate(self.parts):
            blocks = part.as_blocks(num_rows, num_cols)
            if blocks is None:
                continue
            others = [p for j, p in enumerate(self.parts) if j != i]
            rest = reduce(and_, others) if others else None
            return blocks if rest is None else blocks.intersect_blocks(rest)
        return None

    def first_key(self, end: int) -> int | None:
        known = [k for p in self.parts if (k := p.first_key(end)) is not None]
        return max(known) if known else None

    def lookahead_error(self, step: int) -> str | None:
        reasons = [p.lookahead_error(step) for p in self.parts]
        if any(r is None for r in reasons):
            return None  # one bounded part bounds the intersection
        return "; ".join(r for r in reasons if r is not None)

    @property
    def padding_lengths(self) -> Tensor | None:
        known = [n for p in self.parts if (n := p.padding_lengths) is not None]
        return reduce(torch.minimum, known) if known else None

    def without_padding(self) -> Mask:
        kept = _not_full(tuple(p.without_padding() for p in self.parts))
        return reduce(and_, kept) if kept else Full()

    @property
    def grid_window(self) -> tuple[int, int] | None:
        core = _not_full(self.parts)
        return core[0].grid_window if len(core) == 1 else None

    @property
    def segmentation(self) -> tuple[tuple[int, ...], Tensor | None] | None:
        found = [s for p in self.parts if (s := p.segmentation) is not None]
        return found[0] if len(found) == 1 else None


class Intersection(_Meet, IntervalMask):
    r"""Intersection of interval masks, itself an interval mask:
    :math:`[\max_k \mathrm{start}_k, \min_k \mathrm{end}_k)`. Built by ``&``; keeps band structure.

    Examples:
        >>> from attnmm.masks import Causal, Padding, Window
        >>> m = Window(2, 2) & Causal() & Padding([3, 4])
        >>> m
        Window(left=2, right=2) & Causal() & Padding(lengths=[3, 4])
        >>> m.structure.kind, m.structure.left, m.structure.right
        ('band', 2, 0)
    """

    parts: tuple[IntervalMask, ...]  # type: ignore[assignment]

    def __init__(self, *parts: IntervalMask) -> None:
        # per-item parts (Padding) first, shown as written: the same set, and the order in which
        # FlexAttention's CPU code generator compiles a per-item mask with dynamic shapes (a Padding
        # read after a Window generates C++ that does not compile, torch 2.14)
        _Composite.__init__(self, tuple(sorted(parts, key=lambda p: not p.batched)), "&")
        self._written = parts

    def __repr__(self) -> str:
        return " & ".join(_wrap(p, type(self)) for p in self._written)

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        starts, ends = zip(*(p.interval(b, q_idx) for p in self.parts))
        start, end = starts[0], ends[0]
        for s, e in zip(starts[1:], ends[1:]):
            start, end = torch.maximum(start, s), torch.minimum(end, e)
        return start, end

    @property
    def band(self) -> tuple[int | None, int | None]:
        lefts = [p.band[0] for p in self.parts if p.band[0] is not None]
        rights = [p.band[1] for p in self.parts if p.band[1] is not None]
        return (min(lefts) if lefts else None), (min(rights) if rights else None)

    @property
    def structure(self) -> Structure:
        core = [p for p in self.parts if not isinstance(p, Full)]
        if not self.batched and not core:
            return Structure("full")
        if not self.batched and all(isinstance(p, Causal) for p in core):
            return Structure("causal", None, 0)
        return IntervalMask.structure.fget(self)  # type: ignore[attr-defined]


class And(_Meet):
    r"""Intersection :math:`A(i) \cap A'(i)` of general masks. Built by ``&``.

    The sparse form enumerates the sparser operand's pairs and keeps those the other allows, so it
    costs O(nnz) of that operand.
    """

    def __init__(self, *parts: Mask) -> None:
        super().__init__(parts, "&")

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out & p.mask_mod(b, h, q_idx, kv_idx)
        return out

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The smallest operand bound (an intersection has at most as many pairs as any operand)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        bounds = [b for p in self.parts if (b := _part_bound(p, num_rows, num_cols, batch_size)) is not None]
        return min(bounds) if bounds else None

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        # enumerate the operand with the fewest pairs, judged by the operands' cheap bounds (exact for
        # the built-in masks but complements), counting an operand's pairs only when it has no bound
        counts = []
        for p in self.parts:
            bound = _part_bound(p, num_rows, num_cols, batch_size)
            if bound is None:
                bound = p.nnz(num_rows, num_cols, batch_size if p.batched else None)
                bound *= batch_size if batch_size is not None and not p.batched else 1
            counts.append(bound)
        first = min(range(len(self.parts)), key=counts.__getitem__)
        base = self.parts[first]._pairs(
            num_rows, num_cols, batch_size if self.parts[first].batched else None, device
        )
        if batch_size is not None:
            base = base.expand(batch_size)
        b = base.batch if base.batch is not None else torch.zeros_like(base.row)
        keep = torch.ones_like(base.row, dtype=torch.bool)
        h = torch.zeros_like(base.row)
        for i, p in enumerate(self.parts):
            if i != first:
                keep &= p.mask_mod(b, h, base.row, base.col)
        batch = base.batch[keep] if base.batch is not None else None
        return Pairs(base.row[keep], base.col[keep], batch, num_rows, num_cols, base.batch_size)


class Or(_Composite):
    r"""Union :math:`A(i) \cup A'(i)`. Built by ``|``; the sparse form merges both operands' pairs.

    Examples:
        >>> from attnmm.masks import Window
        >>> print((Window(0, 0) | Window(0, 2)).picture(3))
        1 1 1
        0 1 1
        0 0 1
    """

    def __init__(self, *parts: Mask) -> None:
        flat: list[Mask] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, Or) else (p,))
        super().__init__(tuple(flat), "|")

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = self.parts[0].mask_mod(b, h, q_idx, kv_idx)
        for p in self.parts[1:]:
            out = out | p.mask_mod(b, h, q_idx, kv_idx)
        return out

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The sum of the operands' bounds, at most B * L * S; ``None`` if an operand has none."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        bounds = [_part_bound(p, num_rows, num_cols, batch_size) for p in self.parts]
        if any(b is None for b in bounds):
            return None
        return min(sum(bounds), (batch_size or 1) * num_rows * num_cols)  # type: ignore[arg-type]

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return Or(*(p.shifted(q_offset, kv_offset) for p in self.parts))

    def first_key(self, end: int) -> int | None:
        """A key allowed by any part: the earliest of the parts' bounds (``None`` if one has none)."""
        bounds = [p.first_key(end) for p in self.parts]
        return None if any(b is None for b in bounds) else min(b for b in bounds if b is not None)

    def lookahead_error(self, step: int) -> str | None:
        """A union is bounded only if every part is."""
        return next((r for p in self.parts if (r := p.lookahead_error(step)) is not None), None)

    def without_padding(self) -> Mask:
        parts = [p.without_padding() for p in self.parts]
        return Full() if len(_not_full(tuple(parts))) < len(parts) else Or(*parts)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        keys = []
        for p in self.parts:
            pp = p._pairs(num_rows, num_cols, batch_size if p.batched else None, device)
            if batch_size is not None:
                pp = pp.expand(batch_size)
            keys.append(pp.segment() * num_cols + pp.col)
        return pairs_from_keys(torch.cat(keys), num_rows, num_cols, batch_size)


class Not(_Composite):
    r"""Complement :math:`\{0, \dots, S-1\} \setminus A(i)`. Built by ``~``.

    Its sparse form filters all L x S pairs, O(L * S): the complement of a sparse mask is dense.

    Examples:
        >>> from attnmm.masks import Causal
        >>> print((~Causal()).picture(3))
        0 1 1
        0 0 1
        0 0 0
    """

    def __init__(self, inner: Mask) -> None:
        super().__init__((inner,), "~")

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return ~self.parts[0].mask_mod(b, h, q_idx, kv_idx)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return Not(self.parts[0].shifted(q_offset, kv_offset))

    def lookahead_error(self, step: int) -> str | None:
        return f"{self!r} is a complement, which may allow any later position"

    def without_padding(self) -> Mask:
        return Not(self.parts[0].without_padding())

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """B * L * S: the complement's sparse form filters every pair (see :meth:`_pairs`)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        return (batch_size or 1) * num_rows * num_cols

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        full = Full()._pairs(num_rows, num_cols, None, device)
        if batch_size is not None:
            full = full.expand(batch_size)
        b = full.batch if full.batch is not None else torch.zeros_like(full.row)
        keep = self.mask_mod(b, torch.zeros_like(b), full.row, full.col)
        batch = full.batch[keep] if full.batch is not None else None
        return Pairs(full.row[keep], full.col[keep], batch, num_rows, num_cols, full.batch_size)

    def __repr__(self) -> str:
        inner = self.parts[0]
        return f"~({inner!r})" if isinstance(inner, _Composite) else f"~{inner!r}"


M = TypeVar("M", bound=Mask)


def find_part(mask: Mask | None, kind: type[M]) -> M | None:
    """The first mask of type ``kind`` in ``mask``: itself, or an operand of a composition, searched
    depth first; ``None`` if there is none.

    Examples:
        >>> from attnmm.masks import Chunk, Padding
        >>> find_part(Padding([3]) & Chunk(2, 1), Chunk)
        Chunk(size=2, left_chunks=1)
    """
    if isinstance(mask, kind):
        return mask
    if isinstance(mask, _Composite):
        for part in mask.parts:
            found = find_part(part, kind)
            if found is not None:
                return found
    return None


def intersect(a: Mask, b: Mask) -> Mask:
    """``a & b``: an :class:`Intersection` when both are interval masks, else an :class:`And`."""
    parts: list[Mask] = []
    for m in (a, b):
        parts.extend(m.parts if isinstance(m, (Intersection, And)) else (m,))
    if all(isinstance(p, IntervalMask) for p in parts):
        return Intersection(*parts)  # type: ignore[arg-type]
    return And(*parts)


__all__ = ["And", "Intersection", "Not", "Or", "find_part", "intersect"]
