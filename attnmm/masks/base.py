r"""The :class:`Mask` base class, a definition of the allowed set :math:`A(i)`, with its algebra: intersection
(``&``, :class:`And` and :class:`Intersection`), union (``|``, :class:`Or`), complement (``~``, :class:`Not`)
and the view of a mask from an offset (:class:`Shifted`), which every mask's answers are built on, and
:class:`Full`, the unit of the algebra. Nothing here imports another mask module."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import reduce
from operator import and_, or_
from typing import Literal

import torch
from torch import Tensor

from attnmm.masks._pairs import Pairs, broadcast_shape, pairs_from_keys, pairs_from_ranges

#: What a dispatcher may exploit: ``full`` (every key), ``causal`` (j <= i), ``band`` (an interval
#: of bounded width around the diagonal), ``interval`` (one contiguous key range per query, unbounded
#: width), ``segments`` (a :class:`~attnmm.masks.Segments` mask: blocks of segments, each with its own
#: mask) or ``sparse`` (anything else).
StructureKind = Literal["full", "causal", "band", "interval", "segments", "sparse"]

#: A per-query key range: ``interval(b, q_idx) -> (start, end)``, half-open, broadcasting.
Interval = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]

#: Sentinel for "no upper bound" in interval masks; larger than any realistic sequence length.
UNBOUNDED = 2**62


def unbounded(idx: Tensor) -> int:
    """:data:`UNBOUNDED` for positions of ``idx``'s integer dtype: half its largest value, so that a position
    plus or minus it cannot overflow (2**62 for int64; 2**30 for the int32 positions of FlexAttention's
    kernels)."""
    return UNBOUNDED if idx.dtype == torch.int64 else (torch.iinfo(idx.dtype).max + 1) // 2

#: Interval masks count their pairs exactly in :meth:`IntervalMask.nnz_bound` up to this many query
#: rows (B * L); beyond it they bound the count from their band in O(1).
EXACT_COUNT_ROWS = 1 << 22


@dataclass(frozen=True, eq=False)
class Structure:
    """What a mask's allowed set is, in the few numbers its kind needs: the one description that
    backends, the planner and every other consumer read (none tests for a mask class or asks a mask
    method of its own). Each field claims nothing when left at its default; a mask fills what it knows.
    Its ``repr`` shows the dispatch fields (``kind``, ``left``, ``right``, ``batched``).

    Args:
        kind (str): what a backend may exploit: ``"full"``, ``"causal"``, ``"band"``, ``"interval"``,
            ``"segments"`` or ``"sparse"`` (see :data:`StructureKind`).
        left (int, optional): every allowed key satisfies ``j >= i - left`` (any kind may state it).
        right (int, optional): every allowed key satisfies ``j <= i + right``.
        batched (bool): whether the allowed set depends on the batch item.
        batch_size (int, optional): the batch size a batched mask was built for.
        op (str, optional): ``"&"``, ``"|"`` or ``"~"`` for a composition of ``parts``, whose consumers
            answer from the parts' structures.
        parts (tuple of Mask): the operands of ``op``.
        chunk (int, optional): no query attends a key past the end of its block of ``chunk``
            positions (blocks start at multiples of it; a ``Chunk``'s size).
        lengths (LongTensor, optional): (B,) the mask is key padding: item ``b`` allows exactly the keys
            before ``lengths[b]`` (a ``Padding``).
        grid (tuple of int, optional): ``(height, width)`` of the patch grid the mask is over (row-major).
        window (tuple of int, optional): ``(kernel, dilation)`` when the mask is exactly a zero-padded
            convolution's receptive field on its grid.
        segments (tuple, optional): ``(sizes, lengths)`` of the segments the mask lays out (``lengths``
            (B, K), or ``None`` when every segment is whole); a mask that states them is a
            :class:`~attnmm.masks.Segments` mask.
        documents (LongTensor, optional): (D,) lengths of documents packed one after another, each
            attending only itself, the same for every item (a ``Documents`` packing).
        padded (Mask, optional): for a packed-layout mask, the same allowed set as a padded-layout mask
            of one item (B = 1, L = S = N) that more backends take.
        interval (callable, optional): ``interval(b, q_idx) -> (start, end)``, the half-open key range
            of each query, when the allowed set is one range per query (an :class:`IntervalMask`).
    """

    kind: StructureKind = "sparse"
    left: int | None = None
    right: int | None = None
    batched: bool = False
    batch_size: int | None = field(default=None, repr=False)
    op: Literal["&", "|", "~"] | None = field(default=None, repr=False)
    parts: tuple[Mask, ...] = field(default=(), repr=False)
    chunk: int | None = field(default=None, repr=False)
    lengths: Tensor | None = field(default=None, repr=False)
    grid: tuple[int, int] | None = field(default=None, repr=False)
    window: tuple[int, int] | None = field(default=None, repr=False)
    segments: tuple[tuple[int, ...], Tensor | None] | None = field(default=None, repr=False)
    documents: Tensor | None = field(default=None, repr=False)
    padded: Mask | None = field(default=None, repr=False)
    interval: Interval | None = field(default=None, repr=False)


class Mask(ABC):
    r"""The allowed set of attention: query :math:`i` may attend key :math:`j` iff
    :math:`j \in A(i)`. **True means may attend.**

    .. math::
        \mathbf{o}_i = \sum_{j \in A(i)} a_{ij} \mathbf{v}_j, \qquad
        a_{ij} = \frac{\exp(s_{ij})}{\sum_{k \in A(i)} \exp(s_{ik})}, \qquad
        s_{ij} = \mathbf{q}_i^\top \mathbf{k}_j \cdot \mathrm{scale} + b_{ij}

    A query with an empty :math:`A(i)` gets :math:`\mathbf{o}_i = 0`.

    A subclass defines :math:`A(i)` once, as the predicate :meth:`mask_mod`
    (:math:`\mathbb{1}[j \in A_b(i)]`), and implements :meth:`_pairs`, the set
    :math:`\{(b, i, j) : j \in A_b(i)\}` enumerated in O(nnz). Everything else is derived:
    :meth:`dense`, :meth:`pairs`, :meth:`nnz`, :meth:`density`, :meth:`picture`, and the
    composition operators ``&`` (:math:`A \cap A'`), ``|`` (:math:`A \cup A'`) and ``~``
    (complement). :attr:`structure` is all that backends and other consumers read of a mask beyond
    those: its kind and the few numbers the kind needs, from which :mod:`attnmm.masks.queries` answers
    their questions; :meth:`shifted` gives the block of a longer sequence in its own coordinates.

    Attributes:
        layout (str, optional): ``"padded"`` for masks of (B, H, L, E) batches, ``"packed"`` for
            masks of PyG's packed node layout (N, H, E), ``None`` when the mask works for both.
        batched (bool): whether :math:`A(i)` depends on the batch item ``b``.
    """

    layout: Literal["padded", "packed"] | None = None
    batched: bool = False

    @abstractmethod
    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        r"""The predicate :math:`\mathbb{1}[j \in A_b(i)]`, elementwise with broadcasting.

        It has FlexAttention's ``mask_mod`` signature, so it can be handed to
        ``torch.nn.attention.flex_attention.create_block_mask``.
        """

    @abstractmethod
    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        """Enumerate the allowed pairs sorted by (batch, row, col) in O(nnz); sizes are checked."""

    #: The batch size a batched mask was built for (read as :attr:`Structure.batch_size`).
    _batch_size: int | None = None

    @property
    def structure(self) -> Structure:
        """What this mask's allowed set is, for backends and consumers (default: claims nothing)."""
        return Structure(batched=self.batched, batch_size=self._batch_size)

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        """Raise ``ValueError`` when the mask cannot describe an (L, S) attention of that batch."""
        if num_rows < 0 or num_cols < 0:
            raise ValueError(f"sizes must be non-negative, got L={num_rows}, S={num_cols}")
        own = self._batch_size
        if own is not None and batch_size is not None and own != batch_size:
            raise ValueError(
                f"{self!r} was built for a batch of {own} items but the input has batch size "
                f"{batch_size}; build the mask from this batch's lengths"
            )

    # ---------------------------------------------------------------- what consumers ask

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        r"""The mask between the queries at positions ``q_offset + i`` and the keys at
        ``kv_offset + j``: :math:`A'_b(i) = \{j : \mathrm{kv\_offset} + j \in
        A_b(\mathrm{q\_offset} + i)\}`, the block of a longer sequence in its own coordinates.

        The default is a :class:`~attnmm.masks.shifted.Shifted` view of this mask; a mask whose
        allowed set depends on :math:`i - j` only returns itself for equal offsets, and an interval
        mask stays an interval mask (so a block of a band stays a band).
        """
        return Shifted(self, q_offset, kv_offset)

    # ---------------------------------------------------------------- derived representations

    def _resolve(self, num_rows: int, num_cols: int | None, batch_size: int | None) -> tuple[int, int, int | None]:
        num_cols = num_rows if num_cols is None else num_cols
        if self.batched and batch_size is None:
            batch_size = self._batch_size
        self.check(num_rows, num_cols, batch_size)
        return num_rows, num_cols, batch_size if self.batched else None

    def dense(
        self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None, *,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """The reference form: a bool tensor (L, S), or (B, L, S) for a batched mask.

        Built by evaluating :meth:`mask_mod` on every (i, j); O(L * S), meant for tests, small
        inputs and the reference backend.
        """
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        q = torch.arange(num_rows, device=device).view(-1, 1)
        kv = torch.arange(num_cols, device=device).view(1, -1)
        zero = torch.zeros((), dtype=torch.long, device=device)
        b = zero if batch_size is None else torch.arange(batch_size, device=device).view(-1, 1, 1)
        shape = (num_rows, num_cols) if batch_size is None else (batch_size, num_rows, num_cols)
        return self.mask_mod(b, zero, q, kv).expand(shape).clone()

    def pairs(
        self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None, *,
        device: torch.device | str | None = None,
    ) -> Pairs:
        """The sparse form: allowed pairs sorted by query, in O(nnz) without the dense form."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        return self._pairs(num_rows, num_cols, batch_size, torch.device(device or "cpu"))

    def nnz(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int:
        """Number of allowed pairs (summed over the batch for a batched mask)."""
        return self.pairs(num_rows, num_cols, batch_size).nnz

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """An upper bound on :meth:`nnz`, computed without enumerating the pairs (O(L) time or less),
        or ``None`` when the mask cannot bound it cheaply (the default).

        :func:`~attnmm.attend` uses it to refuse, before allocating anything, an attention whose sparse
        form would not fit in memory; a mask with a closed-form count should override it.
        """
        return None

    def density(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> float:
        """Fraction of the L x S (x B) pairs that are allowed."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        total = num_rows * num_cols * (batch_size or 1)
        return self.nnz(num_rows, num_cols, batch_size) / total if total else 0.0

    def picture(self, num_rows: int, num_cols: int | None = None, b: int = 0) -> str:
        """A 0/1 picture of the allowed matrix (row i = query i), for small sizes.

        Examples:
            >>> from attnmm.masks import Window
            >>> print(Window(1, 0).picture(4))
            1 0 0 0
            1 1 0 0
            0 1 1 0
            0 0 1 1
        """
        num_cols = num_rows if num_cols is None else num_cols
        if num_rows * num_cols > 128 * 128:
            raise ValueError(
                f"picture() is for small masks, got {num_rows} x {num_cols}; use attnmm.viz.plot_mask"
            )
        dense = self.dense(num_rows, num_cols)
        if dense.dim() == 3:
            dense = dense[b]
        return "\n".join(" ".join("1" if x else "0" for x in row) for row in dense.tolist())

    # ---------------------------------------------------------------- composition

    def __and__(self, other: Mask) -> Mask:
        return intersect(self, _as_mask(other, "&"))

    def __or__(self, other: Mask) -> Mask:
        return Or(self, _as_mask(other, "|"))

    def __invert__(self) -> Mask:
        return Not(self)


def _as_mask(other: object, op: str) -> Mask:
    if not isinstance(other, Mask):
        raise TypeError(f"masks compose only with masks: got {type(other).__name__} on the right of {op!r}")
    return other


class IntervalMask(Mask):
    r"""A mask whose allowed set is one contiguous key range per query,
    :math:`A_b(i) = \{j : \mathrm{start}_b(i) \le j < \mathrm{end}_b(i)\}`.

    Subclasses implement :meth:`interval`; :meth:`mask_mod`, the pairs and the band structure follow.
    Intersections of interval masks are interval masks, so ``Window(64, 0) & Padding(lengths)``
    keeps its band structure.
    """

    @abstractmethod
    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        """Half-open key range ``[start, end)`` of query ``q_idx`` in batch item ``b`` (broadcasting;
        ``end`` may exceed S and ``start`` may be negative)."""

    @property
    def band(self) -> tuple[int | None, int | None]:
        """``(left, right)`` such that every allowed j satisfies ``i - left <= j <= i + right``
        (``None``: unbounded on that side)."""
        return None, None

    @property
    def structure(self) -> Structure:
        left, right = self.band
        kind: StructureKind = "band" if left is not None and right is not None else "interval"
        return Structure(kind, left, right, self.batched, self._batch_size, interval=self.interval)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return ShiftedInterval(self, q_offset, kv_offset)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        start, end = self.interval(b, q_idx)
        return (kv_idx >= start) & (kv_idx < end)

    def _ranges(
        self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Flat clamped ``[start, end)`` per segment (``b * L + i``)."""
        q, b = torch.arange(num_rows, device=device), torch.zeros((), dtype=torch.long, device=device)
        if batch_size is not None:
            b = torch.arange(batch_size, device=device).view(-1, 1)  # (B, 1) against q (L,)
        start, end = self.interval(b, q)
        shape = broadcast_shape(start.shape, end.shape, q.shape, b.shape)
        start = start.expand(shape).clamp(0, num_cols).reshape(-1)
        end = end.expand(shape).clamp(0, num_cols).reshape(-1)
        return start, torch.maximum(start, end)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        seg, col = pairs_from_ranges(*self._ranges(num_rows, num_cols, batch_size, device))
        if batch_size is None:
            return Pairs(seg, col, None, num_rows, num_cols, None)
        return Pairs(seg % num_rows, col, seg // num_rows, num_rows, num_cols, batch_size)

    def nnz(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int:
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        start, end = self._ranges(num_rows, num_cols, batch_size, torch.device("cpu"))
        return int((end - start).sum())

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The exact count in O(B * L) for up to :data:`EXACT_COUNT_ROWS` query rows, else
        ``B * L * min(S, left + right + 1)`` from the band (``B * L * S`` without one), in O(1)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        rows = (batch_size or 1) * num_rows
        if rows <= EXACT_COUNT_ROWS:
            return self.nnz(num_rows, num_cols, batch_size)
        left, right = self.band
        width = num_cols if left is None or right is None else min(num_cols, left + right + 1)
        return rows * width


class Full(IntervalMask):
    r"""Full attention, :math:`A(i) = \{0, \dots, S-1\}`.

    Examples:
        >>> from attnmm.masks import Full
        >>> Full()
        Full()
        >>> print(Full().picture(2, 3))
        1 1 1
        1 1 1
    """

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(q_idx), torch.full_like(q_idx, unbounded(q_idx))

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return torch.ones_like(q_idx + kv_idx, dtype=torch.bool)

    @property
    def structure(self) -> Structure:
        return Structure("full", interval=self.interval)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return self  # every key, from anywhere

    def __repr__(self) -> str:
        return "Full()"


#: Below this many (L + q_offset) x (S + kv_offset) positions a shifted mask filters the dense form for
#: its pairs; above it, the inner mask's own pairs.
_DENSE_POSITIONS = 1 << 16


def _check_offsets(q_offset: int, kv_offset: int) -> tuple[int, int]:
    for name, value in (("q_offset", q_offset), ("kv_offset", kv_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return q_offset, kv_offset


class Shifted(Mask):
    r"""``inner`` between the queries at positions ``q_offset + i`` and the keys at ``kv_offset + j``:

    .. math::
        A'_b(i) = \{j : \mathrm{kv\_offset} + j \in A_b(\mathrm{q\_offset} + i)\}

    What :meth:`~attnmm.masks.Mask.shifted` gives for a mask that has no shifted form of its own: a block of a
    longer sequence (one document of a packing, one step of a stream) in the block's own coordinates.
    The predicate is the inner one at the absolute positions; the pairs are the inner mask's over the
    larger area, kept where both positions are past the offsets (or the dense form's, on small areas).

    Args:
        inner (Mask): the mask in absolute positions.
        q_offset (int): the absolute position of query 0.
        kv_offset (int): the absolute position of key 0.

    Examples:
        >>> from attnmm.masks import Grid
        >>> m = Grid(2, 3, kernel=3).shifted(3, 0)  # the second row's queries, every key
        >>> m
        Grid(height=2, width=3, kernel=3) at queries 3.., keys 0..
        >>> print(m.picture(3, 6))
        1 1 0 1 1 0
        1 1 1 1 1 1
        0 1 1 0 1 1
    """

    def __init__(self, inner: Mask, q_offset: int, kv_offset: int) -> None:
        self.inner = inner
        self.q_offset, self.kv_offset = _check_offsets(q_offset, kv_offset)
        self.layout = inner.layout  # type: ignore[assignment]
        self.batched = inner.batched
        self._batch_size = inner._batch_size

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return self.inner.mask_mod(b, h, q_idx + self.q_offset, kv_idx + self.kv_offset)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        rows, cols = num_rows + self.q_offset, num_cols + self.kv_offset
        if rows * cols <= _DENSE_POSITIONS:  # (a batch dim exactly when batch_size is given)
            *batch, row, col = self.dense(num_rows, num_cols, batch_size, device=device).nonzero(as_tuple=True)
            return Pairs(row, col, batch[0] if batch else None, num_rows, num_cols, batch_size)
        whole = self.inner.pairs(rows, cols, batch_size, device=device)
        kept = whole.select((whole.row >= self.q_offset) & (whole.col >= self.kv_offset))
        return replace(kept, row=kept.row - self.q_offset, col=kept.col - self.kv_offset, num_rows=num_rows,
                       num_cols=num_cols)

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The inner mask's bound over the area from position 0 (this block lies in it); 0 for an empty
        block, ``None`` (no bound) when the inner mask is laid over its own shape only (a ``Segments``
        mask of fixed sizes answers for that shape alone)."""
        num_cols = num_rows if num_cols is None else num_cols
        if num_rows == 0 or num_cols == 0:
            return 0
        try:
            return self.inner.nnz_bound(num_rows + self.q_offset, num_cols + self.kv_offset, batch_size)
        except ValueError:
            return None

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        q_offset, kv_offset = _check_offsets(q_offset, kv_offset)
        return self.inner.shifted(self.q_offset + q_offset, self.kv_offset + kv_offset)

    def __repr__(self) -> str:
        return f"{self.inner!r} at queries {self.q_offset}.., keys {self.kv_offset}.."


class ShiftedInterval(IntervalMask, Shifted):
    r"""An interval mask seen from an offset, itself an interval mask: query :math:`i`'s key range is
    the inner range of query ``q_offset + i`` less ``kv_offset``, and the band moves by the offsets'
    difference :math:`d = \mathrm{q\_offset} - \mathrm{kv\_offset}` (``left - d``, ``right + d``, each
    at least 0), so a block of a banded mask stays banded.

    Examples:
        >>> from attnmm.masks import Chunk
        >>> m = Chunk(4, 0).shifted(2, 2)  # positions 2.. of chunks of 4: chunks end at 2, 6, ...
        >>> print(m.picture(5))
        1 1 0 0 0
        1 1 0 0 0
        0 0 1 1 1
        0 0 1 1 1
        0 0 1 1 1
        >>> m.structure.kind, m.band
        ('band', (3, 3))
    """

    inner: IntervalMask
    shifted = Shifted.shifted  # (the rest as an interval mask's)

    def interval(self, b: Tensor, q_idx: Tensor) -> tuple[Tensor, Tensor]:
        start, end = self.inner.interval(b, q_idx + self.q_offset)
        return start - self.kv_offset, end - self.kv_offset

    @property
    def band(self) -> tuple[int | None, int | None]:
        # a band is a bound on where the keys lie: a side pushed past the diagonal is bounded by it
        left, right = self.inner.band
        d = self.q_offset - self.kv_offset
        return (None if left is None else max(left - d, 0)), (None if right is None else max(right + d, 0))


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
    sizes = {p._batch_size for p in parts if p._batch_size is not None}
    if len(sizes) > 1:
        raise ValueError(f"cannot compose batched masks built for different batch sizes: {sorted(sizes)}")
    return sizes.pop() if sizes else None


def _part_bound(part: Mask, num_rows: int, num_cols: int, batch_size: int | None, count: bool = False) -> int | None:
    """``part.nnz_bound`` over the whole batch (an unbatched part counts once per batch item); with ``count``,
    the part's exact count where it has no bound."""
    own = batch_size if part.batched else None
    bound = part.nnz_bound(num_rows, num_cols, own)
    if bound is None and count:
        bound = part.nnz(num_rows, num_cols, own)
    return bound if bound is None or part.batched or batch_size is None else bound * batch_size


def _part_pairs(part: Mask, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
    """``part``'s pairs over the whole batch: an unbatched part's repeated for each batch item."""
    pairs = part._pairs(num_rows, num_cols, batch_size if part.batched else None, device)
    return pairs if batch_size is None else pairs.expand(batch_size)


def _allowed(pairs: Pairs, masks: Iterable[Mask]) -> Pairs:
    """The ``pairs`` that every one of ``masks`` allows."""
    b = pairs.batch if pairs.batch is not None else torch.zeros_like(pairs.row)
    keep, h = torch.ones_like(pairs.row, dtype=torch.bool), torch.zeros_like(pairs.row)
    for m in masks:
        keep &= m.mask_mod(b, h, pairs.row, pairs.col)
    return pairs.select(keep)


def _wrap(m: Mask, parent: type) -> str:
    return f"({m!r})" if isinstance(m, (And, Or, Intersection)) and not isinstance(m, parent) else repr(m)


class _Composite(Mask):
    def __init__(self, parts: tuple[Mask, ...], op: Literal["&", "|", "~"]) -> None:
        self.parts = parts
        self.layout = _layout(parts, op)  # type: ignore[assignment]
        self.batched = any(p.batched for p in parts)
        self._batch_size = _batch_size(parts)
        self._op = op

    @property
    def structure(self) -> Structure:
        return self._composed(Mask.structure.fget(self))  # type: ignore[attr-defined]

    def _composed(self, structure: Structure) -> Structure:
        """``structure`` with this composition's operator and parts, which consumers answer from."""
        return replace(structure, op=self._op, parts=self.parts, batch_size=self._batch_size)

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        for p in self.parts:
            p.check(num_rows, num_cols, batch_size)

    def __repr__(self) -> str:
        return f" {self._op} ".join(_wrap(p, type(self)) for p in self.parts)


class _Meet(_Composite):
    """An intersection: a key must be allowed by every part."""

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return reduce(and_, (p.shifted(q_offset, kv_offset) for p in self.parts))


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
        return reduce(torch.maximum, starts), reduce(torch.minimum, ends)

    @property
    def band(self) -> tuple[int | None, int | None]:
        lefts = [p.band[0] for p in self.parts if p.band[0] is not None]
        rights = [p.band[1] for p in self.parts if p.band[1] is not None]
        return (min(lefts) if lefts else None), (min(rights) if rights else None)

    @property
    def structure(self) -> Structure:
        core = [p for p in self.parts if p.structure.kind != "full" or p.batched]
        if not self.batched and not core:
            return self._composed(Structure("full", interval=self.interval))
        if not self.batched and all(p.structure.kind == "causal" for p in core):
            return self._composed(Structure("causal", None, 0, interval=self.interval))
        return self._composed(IntervalMask.structure.fget(self))  # type: ignore[attr-defined]


class And(_Meet):
    r"""Intersection :math:`A(i) \cap A'(i)` of general masks. Built by ``&``.

    The sparse form enumerates the sparser operand's pairs and keeps those the other allows, so it
    costs O(nnz) of that operand.
    """

    def __init__(self, *parts: Mask) -> None:
        super().__init__(parts, "&")

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return reduce(and_, (p.mask_mod(b, h, q_idx, kv_idx) for p in self.parts))

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The smallest operand bound (an intersection has at most as many pairs as any operand)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        bounds = [b for p in self.parts if (b := _part_bound(p, num_rows, num_cols, batch_size)) is not None]
        return min(bounds) if bounds else None

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        # enumerate the operand with the fewest pairs, judged by the operands' cheap bounds (exact for
        # the built-in masks but complements), counting an operand's pairs only when it has no bound
        counts = [_part_bound(p, num_rows, num_cols, batch_size, count=True) for p in self.parts]
        sizes = [math.inf if n is None else n for n in counts]
        first = min(range(len(sizes)), key=lambda i: sizes[i])
        base = _part_pairs(self.parts[first], num_rows, num_cols, batch_size, device)
        return _allowed(base, (p for i, p in enumerate(self.parts) if i != first))


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
        return reduce(or_, (p.mask_mod(b, h, q_idx, kv_idx) for p in self.parts))

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The sum of the operands' bounds, at most B * L * S; ``None`` if an operand has none."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        bounds = [_part_bound(p, num_rows, num_cols, batch_size) for p in self.parts]
        if any(b is None for b in bounds):
            return None
        return min(sum(bounds), (batch_size or 1) * num_rows * num_cols)  # type: ignore[arg-type]

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return Or(*(p.shifted(q_offset, kv_offset) for p in self.parts))

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        keys = [(pp := _part_pairs(p, num_rows, num_cols, batch_size, device)).segment() * num_cols + pp.col
                for p in self.parts]
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

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """B * L * S: the complement's sparse form filters every pair (see :meth:`_pairs`)."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        return (batch_size or 1) * num_rows * num_cols

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        return _allowed(_part_pairs(Full(), num_rows, num_cols, batch_size, device), [self])

    def __repr__(self) -> str:
        inner = self.parts[0]
        return f"~({inner!r})" if isinstance(inner, _Composite) else f"~{inner!r}"


def intersect(a: Mask, b: Mask) -> Mask:
    """``a & b``: an :class:`Intersection` when both are interval masks, else an :class:`And`."""
    parts: list[Mask] = []
    for m in (a, b):
        parts.extend(m.parts if isinstance(m, (Intersection, And)) else (m,))
    if all(isinstance(p, IntervalMask) for p in parts):
        return Intersection(*parts)  # type: ignore[arg-type]
    return And(*parts)
