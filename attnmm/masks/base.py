r"""The :class:`Mask` base class: a definition of the allowed set :math:`A(i)`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from attnmm.masks._pairs import Pairs, pairs_from_ranges

if TYPE_CHECKING:
    from attnmm.masks.segments import Segments

#: What a dispatcher may exploit: ``full`` (every key), ``causal`` (j <= i), ``band`` (an interval
#: of bounded width around the diagonal), ``interval`` (one contiguous key range per query, unbounded
#: width), ``segments`` (a :class:`~attnmm.masks.Segments` mask: blocks of segments, each with its own
#: mask) or ``sparse`` (anything else).
StructureKind = Literal["full", "causal", "band", "interval", "segments", "sparse"]

#: Sentinel for "no upper bound" in interval masks; larger than any realistic sequence length.
UNBOUNDED = 2**62

#: Interval masks count their pairs exactly in :meth:`IntervalMask.nnz_bound` up to this many query
#: rows (B * L); beyond it they bound the count from their band in O(1).
EXACT_COUNT_ROWS = 1 << 22


@dataclass(frozen=True)
class Structure:
    """Structure of a mask that backends can exploit.

    Args:
        kind (str): one of ``"full"``, ``"causal"``, ``"band"``, ``"interval"``, ``"segments"``,
            ``"sparse"``.
        left (int, optional): for ``band``, the allowed keys satisfy ``j >= i - left``.
        right (int, optional): for ``band``, the allowed keys satisfy ``j <= i + right``.
        batched (bool): whether the allowed set depends on the batch item.
    """

    kind: StructureKind
    left: int | None = None
    right: int | None = None
    batched: bool = False


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
    (complement). :attr:`structure` tells the dispatcher what it may exploit.

    A mask also answers what its consumers need to know, so none of them tests for a mask class:
    :meth:`shifted` (the block of a longer sequence, in its own coordinates), :meth:`as_blocks` (its
    segments, computed block by block), :meth:`first_key`, :attr:`block_sizes` and
    :meth:`lookahead_error` (what a stream may drop and when it may emit), :attr:`padding_lengths` and
    :meth:`without_padding` (the batch's real lengths), :attr:`grid_size` and :attr:`grid_window` (the
    patch grid), :attr:`segmentation` (the segments a head pools). Each has a default that claims
    nothing; a mask overrides what it knows, and a composition answers from its parts.

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

    @property
    def structure(self) -> Structure:
        """What a backend may exploit about this mask (default: nothing)."""
        return Structure("sparse", batched=self.batched)

    @property
    def batch_size(self) -> int | None:
        """The batch size a batched mask was built for, else ``None``."""
        return None

    def as_padded(self) -> Mask | None:
        """This packed-layout mask as a padded-layout mask of one item (B = 1, L = S = N) with the same
        allowed set, where it has one that backends exploit (the graphs of a
        :class:`~attnmm.masks.SameGraph` are packed :class:`~attnmm.masks.Documents`); ``None``, the
        default, where it has none. :func:`~attnmm.attend` computes a packed problem under it."""
        return None

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        """Raise ``ValueError`` when the mask cannot describe an (L, S) attention of that batch."""
        if num_rows < 0 or num_cols < 0:
            raise ValueError(f"sizes must be non-negative, got L={num_rows}, S={num_cols}")
        own = self.batch_size
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
        from attnmm.masks.shifted import Shifted

        return Shifted(self, q_offset, kv_offset)

    def as_blocks(self, num_rows: int, num_cols: int) -> Segments | None:
        """The mask as a :class:`~attnmm.masks.Segments` mask over ``num_rows`` x ``num_cols`` positions
        when it is made of blocks that can be computed one by one (a ``Segments`` mask, packed
        ``Documents`` and their intersections), else ``None`` (the default)."""
        return None

    def first_key(self, end: int) -> int | None:
        """A lower bound on the keys that any query at position ``end`` or later may attend (keys before
        it can be forgotten by a stream), or ``None`` when such a query may attend any earlier key."""
        return None

    @property
    def block_sizes(self) -> frozenset[int]:
        """Lengths of the blocks whose ends bound the look-ahead (a ``Chunk``'s size); a stream steps by
        a multiple of them."""
        return frozenset()

    def lookahead_error(self, step: int) -> str | None:
        """``None`` when no query attends a key at or past the end of its block of ``step`` positions
        (blocks start at multiples of ``step``), so a stream may emit a block once it has arrived;
        else why not, naming the mask at fault."""
        return f"{self!r} states no bound on how far ahead a query may look"

    @property
    def padding_lengths(self) -> Tensor | None:
        """The real length of every batch item (B,) when the mask allows no key at or past it (a
        ``Padding``'s lengths), else ``None``."""
        return None

    def without_padding(self) -> Mask:
        """The mask on a batch whose every token is real: key padding dropped (``Padding`` becomes
        ``Full()``)."""
        return self

    @property
    def grid_size(self) -> tuple[int, int] | None:
        """``(height, width)`` of the patch grid the mask is over (patches row-major), or ``None``."""
        return None

    @property
    def grid_window(self) -> tuple[int, int] | None:
        """``(kernel, dilation)`` when the mask is exactly a zero-padded convolution's receptive field on
        its grid (a ``Grid`` with truncated borders, maybe intersected with full masks), else ``None``."""
        return None

    @property
    def segmentation(self) -> tuple[tuple[int, ...], Tensor | None] | None:
        """``(sizes, lengths)`` of the segments the mask lays out (``lengths`` (B, K) or ``None`` when
        every segment is whole), or ``None`` for a mask of one sequence."""
        return None

    # ---------------------------------------------------------------- derived representations

    def _resolve(self, num_rows: int, num_cols: int | None, batch_size: int | None) -> tuple[int, int, int | None]:
        num_cols = num_rows if num_cols is None else num_cols
        if self.batched and batch_size is None:
            batch_size = self.batch_size
        self.check(num_rows, num_cols, batch_size)
        return num_rows, num_cols, batch_size if self.batched else None

    def dense(
        self,
        num_rows: int,
        num_cols: int | None = None,
        batch_size: int | None = None,
        *,
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
        if batch_size is None:
            return self.mask_mod(zero, zero, q, kv).expand(num_rows, num_cols).clone()
        b = torch.arange(batch_size, device=device).view(-1, 1, 1)
        out = self.mask_mod(b, zero, q.unsqueeze(0), kv.unsqueeze(0))
        return out.expand(batch_size, num_rows, num_cols).clone()

    def pairs(
        self,
        num_rows: int,
        num_cols: int | None = None,
        batch_size: int | None = None,
        *,
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
        from attnmm.masks.compose import intersect

        return intersect(self, _as_mask(other, "&"))

    def __or__(self, other: Mask) -> Mask:
        from attnmm.masks.compose import Or

        return Or(self, _as_mask(other, "|"))

    def __invert__(self) -> Mask:
        from attnmm.masks.compose import Not

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
        if left is not None and right is not None:
            return Structure("band", left, right, self.batched)
        return Structure("interval", left, right, self.batched)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        from attnmm.masks.shifted import ShiftedInterval

        return ShiftedInterval(self, q_offset, kv_offset)

    def first_key(self, end: int) -> int | None:
        """``end - left`` from the band (``None`` without a left bound)."""
        left = self.band[0]
        return None if left is None else max(0, end - left)

    def lookahead_error(self, step: int) -> str | None:
        """Bounded when the band's right side is 0 (no query looks ahead)."""
        right = self.band[1]
        if right == 0:
            return None
        if right is None:
            return f"{self!r} has no bound on how far ahead a query may look"
        return (
            f"{self!r} lets query i attend key i + {right}, across block boundaries, and each layer adds "
            f"that look-ahead again (num_layers x {right} positions), so it grows with depth"
        )

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        start, end = self.interval(b, q_idx)
        return (kv_idx >= start) & (kv_idx < end)

    def _ranges(
        self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Flat clamped ``[start, end)`` per segment (``b * L + i``)."""
        q = torch.arange(num_rows, device=device)
        if batch_size is None:
            b = torch.zeros((), dtype=torch.long, device=device)
        else:
            b = torch.arange(batch_size, device=device).view(-1, 1)
            q = q.view(1, -1)
        start, end = self.interval(b, q)
        shape = torch.broadcast_shapes(start.shape, end.shape, q.shape, b.shape)
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
