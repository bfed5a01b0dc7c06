r"""Segmented sequences: segments of different modalities laid out one after another, each attending
under its own mask, linked by chosen cross-segment blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks._pairs import Pairs
from attnmm.masks._registry import register_mask
from attnmm.masks.base import Mask, Structure, _part_pairs
from attnmm.masks.full import Full
from attnmm.masks.padding import Padding, check_lengths

#: One entry of a link table: ``False`` (no link), ``True`` (every key of the key segment) or a mask
#: in the two segments' own coordinates (query segment rows, key segment columns).
Link = bool | Mask


class _Blocks(Mask):
    r"""A mask made of blocks: the queries in segments of ``row_sizes``, the keys in segments of
    ``col_sizes``, block :math:`(a, c)` a mask in the two segments' own coordinates (``None``: empty),
    restricted to the real rows and columns of ``row_lengths`` / ``col_lengths`` (B, K) when given.
    :class:`Segments` is the square case; the segments backend computes one query segment's row of
    blocks with it."""

    layout = "padded"

    def __init__(
        self, row_sizes: tuple[int, ...], col_sizes: tuple[int, ...], blocks: tuple[tuple[Mask | None, ...], ...],
        row_lengths: Tensor | None, col_lengths: Tensor | None,
    ) -> None:
        self.row_sizes, self.col_sizes, self.blocks = row_sizes, col_sizes, blocks
        self.row_lengths, self.col_lengths = row_lengths, col_lengths
        given = [t for t in (row_lengths, col_lengths) if t is not None]
        items = {m._batch_size for r in blocks for m in r if m is not None and m._batch_size is not None}
        items |= {int(t.size(0)) for t in given}
        if len(items) > 1:
            raise ValueError(f"the segment masks and lengths are built for different batch sizes: {sorted(items)}")
        self._batch_size = items.pop() if items else None
        self.batched = bool(given) or any(m.batched for r in blocks for m in r if m)
        self._row_offsets, self._row_segment = _layout(row_sizes)
        self._col_offsets, self._col_segment = _layout(col_sizes)
        for a, c, m in self._links():
            try:
                m.check(row_sizes[a], col_sizes[c], self._batch_size)
            except ValueError as err:
                raise ValueError(f"block ({a}, {c}) of {self!r}: {err}") from None

    def _links(self) -> list[tuple[int, int, Mask]]:
        """The linked blocks ``(a, c, mask)`` in (query segment, key segment) order."""
        return [(a, c, m) for a, r in enumerate(self.blocks) for c, m in enumerate(r) if m is not None]

    def check(self, num_rows: int, num_cols: int, batch_size: int | None = None) -> None:
        super().check(num_rows, num_cols, batch_size)
        rows, cols = sum(self.row_sizes), sum(self.col_sizes)
        if num_rows != rows or num_cols != cols:
            extent = f"L = S = {rows}" if rows == cols else f"L = {rows}, S = {cols}"
            raise ValueError(
                f"{self!r} lays its segments over {extent} positions, got L={num_rows}, "
                f"S={num_cols}; pad every segment to its size"
            )

    @property
    def structure(self) -> Structure:
        """``full`` when every block is full and every segment complete (no lengths), else ``sparse``."""
        if not self.batched and all(isinstance(m, Full) for r in self.blocks for m in r):
            return Structure("full")
        return Structure("sparse", batched=self.batched, batch_size=self._batch_size)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        device = q_idx.device
        row_segment, col_segment = self._row_segment.to(device), self._col_segment.to(device)
        qs = row_segment[q_idx.clamp(0, row_segment.numel() - 1)]
        ks = col_segment[kv_idx.clamp(0, col_segment.numel() - 1)]
        qi = q_idx - self._row_offsets.to(device)[qs]  # positions within their segments
        kj = kv_idx - self._col_offsets.to(device)[ks]
        out = (qs < 0) & (ks < 0)  # all False, of the pairs' shape (pointwise: no new buffer inside a kernel)
        for a, c, m in self._links():
            out = out | ((qs == a) & (ks == c) & m.mask_mod(b, h, qi, kj))
        if self.row_lengths is not None:
            out = out & (qi < self.row_lengths.to(device)[b, qs.clamp(max=len(self.row_sizes) - 1)])
        if self.col_lengths is not None:
            out = out & (kj < self.col_lengths.to(device)[b, ks.clamp(max=len(self.col_sizes) - 1)])
        return out

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        row_offsets, col_offsets = self._row_offsets.tolist(), self._col_offsets.tolist()
        rows = (batch_size or 1) * num_rows  # softmax segments b * L + i
        parts = []  # (segment id, column) of every block's pairs, each sorted by (segment, column)
        for a, c, m in self._links():  # each block's pairs in the two segments' own coordinates
            p = _part_pairs(m, self.row_sizes[a], self.col_sizes[c], batch_size, device)
            row, col, batch = p.row, p.col, p.batch
            if batch is not None and (self.row_lengths is not None or self.col_lengths is not None):
                keep = torch.ones_like(row, dtype=torch.bool)
                for lengths, idx, seg in ((self.row_lengths, row, a), (self.col_lengths, col, c)):
                    if lengths is not None:
                        keep &= idx < lengths.to(device)[batch, seg]
                row, col, batch = row[keep], col[keep], batch[keep]
            row, col = row + row_offsets[a], col + col_offsets[c]
            parts.append((row if batch is None else batch * num_rows + row, col))
        # merge without sorting: within a query row, blocks (a, 0), (a, 1), ... hold increasing key
        # ranges, so a pair's place is its row's start + the pairs of that row in earlier blocks + its
        # rank within its block's row
        counts = [torch.bincount(seg, minlength=rows) for seg, _ in parts]
        total = sum(counts, torch.zeros(rows, dtype=torch.long, device=device))
        start = total.cumsum(0) - total
        nnz = int(total.sum())
        out_seg = torch.empty(nnz, dtype=torch.long, device=device)
        out_col = torch.empty(nnz, dtype=torch.long, device=device)
        filled = torch.zeros(rows, dtype=torch.long, device=device)
        for (seg, col), count in zip(parts, counts):
            first = count.cumsum(0) - count  # the block's first pair of every row
            place = start[seg] + filled[seg] + torch.arange(seg.numel(), device=device) - first[seg]
            out_seg[place], out_col[place] = seg, col
            filled += count
        if batch_size is None:
            return Pairs(out_seg, out_col, None, num_rows, num_cols, None)
        return Pairs(out_seg % num_rows, out_col, out_seg // num_rows, num_rows, num_cols, batch_size)

    def nnz_bound(self, num_rows: int, num_cols: int | None = None, batch_size: int | None = None) -> int | None:
        """The sum of the block masks' bounds (exact without lengths when theirs are), or ``None``
        when a block has none."""
        num_rows, num_cols, batch_size = self._resolve(num_rows, num_cols, batch_size)
        total = 0
        for a, c, m in self._links():
            bound = m.nnz_bound(self.row_sizes[a], self.col_sizes[c], batch_size if m.batched else None)
            if bound is None:
                return None
            total += bound * (batch_size if batch_size is not None and not m.batched else 1)
        return total

    def __repr__(self) -> str:
        blocks = ", ".join("[" + ", ".join(repr(m) for m in r) + "]" for r in self.blocks)
        return f"_Blocks(rows={list(self.row_sizes)}, cols={list(self.col_sizes)}, blocks=[{blocks}])"


@register_mask
class Segments(_Blocks):
    r"""One sequence made of K segments laid out one after another (segment :math:`k` occupies the
    positions :math:`[o_k, o_k + n_k)`, :math:`o_k = \sum_{k' < k} n_{k'}`), attending block by
    block: for query :math:`i = o_a + i'` of segment :math:`a` and key :math:`j = o_c + j'` of segment
    :math:`c`,

    .. math::
        j \in A_b(i) \iff j' \in A^{(a, c)}_b(i') \ \wedge\ i' < \mathrm{lengths}_{b,a}
        \ \wedge\ j' < \mathrm{lengths}_{b,c}

    where the block mask :math:`A^{(a, c)}` is, in the segments' own coordinates, ``within[a]`` on the
    diagonal (``None``: full) and the link from :math:`a` to :math:`c` off it (none, full, or a mask of
    its own); no link is the empty set. ``links="none"`` is late fusion (each segment alone),
    ``links="full"`` joint attention (every query sees every key of the other segments), and a K x K
    table of ``True`` / ``False`` / masks says which query segment attends which key segment (e.g.
    text queries attending image keys but not the reverse); the diagonal of a table is ``True`` (the
    segment's ``within`` mask) or ``False`` (no attention within the segment).

    ``lengths`` (B, K) gives each item's real length of every segment; the rest of a segment's span is
    padding, which attends nothing and is attended by nothing, and a length of 0 means the item lacks
    that segment (its queries get output 0). The pairs are built block by block from each block mask's
    own pairs, in O(nnz) per block, and merged in order without a sort; no (L, L) tensor is built.

    Args:
        sizes (list of int): the span of each segment in the padded sequence, (K,); L = S = their sum.
        within (list of Mask or None, optional): the mask within each segment, in its own
            coordinates (e.g. ``Grid(7, 7, kernel=3)`` on 49 image patches, ``Window(16, 4)`` on audio
            frames, ``Causal()`` on text); ``None`` is full attention. (default: all full)
        links (str or table, optional): ``"none"``, ``"full"``, or a K x K table of ``True``,
            ``False`` or masks, row = query segment, column = key segment. (default: :obj:`"none"`)
        lengths (LongTensor or list, optional): real length of every segment of every item, (B, K),
            each between 0 and the segment's size; ``None`` when every segment is full.
            (default: :obj:`None`)

    Examples:
        >>> from attnmm.masks import Causal, Segments, Window
        >>> m = Segments([3, 3], within=[Window(1, 0), Causal()], links=[[True, False], [True, True]])
        >>> m
        Segments(sizes=[3, 3], within=[Window(left=1, right=0), Causal()], links=[[1, 0], [1, 1]])
        >>> print(m.picture(6))
        1 0 0 0 0 0
        1 1 0 0 0 0
        0 1 1 0 0 0
        1 1 1 1 0 0
        1 1 1 1 1 0
        1 1 1 1 1 1
        >>> print(Segments([2, 2], links="full", lengths=[[1, 2]]).picture(4))
        1 0 1 1
        0 0 0 0
        1 0 1 1
        1 0 1 1
    """

    def __init__(
        self, sizes: Sequence[int], within: Sequence[Mask | None] | None = None,
        links: Literal["none", "full"] | Sequence[Sequence[Link]] = "none",
        lengths: Tensor | Sequence[Sequence[int]] | None = None,
    ) -> None:
        sizes = [check_nonneg_int(f"sizes[{k}]", s) for k, s in enumerate(sizes)]
        K = len(sizes)
        if K == 0:
            raise ValueError("Segments needs at least one segment size, got sizes=[]")
        within = [None] * K if within is None else list(within)
        if len(within) != K:
            raise ValueError(f"within must give one mask (or None) per segment: {K} segments, got {len(within)}")
        for k, m in enumerate(within):
            _check_part(f"within[{k}]", m)
        table = _link_table(links, K)
        for a in range(K):
            if isinstance(table[a][a], Mask):
                raise ValueError(
                    f"links[{a}][{a}] is a mask; the mask within segment {a} goes in within[{a}] "
                    "(the diagonal of the link table is True or False)"
                )
        blocks = tuple(
            tuple(x if isinstance(x, Mask) else ((within[a] if a == c else None) or Full()) if x else None
                  for c, x in enumerate(r))
            for a, r in enumerate(table)
        )
        self.sizes = tuple(sizes)
        self.within = tuple(within)
        self.links = links if isinstance(links, str) else tuple(tuple(r) for r in links)
        self.lengths = None if lengths is None else _check_lengths(lengths, self.sizes)
        super().__init__(self.sizes, self.sizes, blocks, self.lengths, self.lengths)

    @property
    def num_segments(self) -> int:
        """K."""
        return len(self.sizes)

    def intersect_blocks(self, other: Mask) -> Segments:
        """``self & other`` as segments: every block intersected with ``other`` seen from the block's
        offsets (:meth:`~attnmm.masks.Mask.shifted`), so each block keeps the structure of its own mask.

        Examples:
            >>> from attnmm.masks import Causal, Segments
            >>> Segments([2, 3], links=[[True, False], [True, True]]).intersect_blocks(Causal())
            Segments(sizes=[2, 3], within=[Causal(), Causal()], links=[[1, 0], [Causal() at queries 2.., keys 0.., 1]])
        """
        offsets = self.offsets
        within = [
            None if self.blocks[k][k] is None else other.shifted(o, o) if m is None else m & other.shifted(o, o)
            for k, (o, m) in enumerate(zip(offsets, self.within))
        ]

        def link(a: int, c: int, block: Mask | None) -> Link:
            if a == c or block is None:
                return block is not None
            shifted = other.shifted(offsets[a], offsets[c])
            return shifted if block.structure.kind == "full" and not block.batched else block & shifted

        table = [[link(a, c, block) for c, block in enumerate(r)] for a, r in enumerate(self.blocks)]
        return Segments(self.sizes, within=within, links=table, lengths=self.lengths)

    @property
    def offsets(self) -> list[int]:
        """First position of every segment and the total length, ``[o_0, ..., o_K]`` (K + 1,)."""
        return self._row_offsets.tolist()

    @property
    def structure(self) -> Structure:
        """``full`` when every block is full and every segment complete (no lengths), else
        ``segments``: the segments backend computes each query segment on its own backend."""
        s = super().structure
        return replace(s, kind="full" if s.kind == "full" else "segments", segments=(self.sizes, self.lengths))

    def row(self, a: int) -> tuple[list[int], Mask | None]:
        """The key segments query segment ``a`` attends, and the mask of its queries over those
        segments' keys laid one after another, with the keys' padding but not the queries' (the
        caller gives padded queries output 0); ``([], None)`` when it attends none.

        A single linked block is its own mask (``& Padding`` of the key segment's lengths), so it
        keeps its structure: a band stays a band, a full block is full.

        Examples:
            >>> from attnmm.masks import Causal, Segments, Window
            >>> m = Segments([3, 2], within=[Window(1, 0), Causal()], links=[[True, False], [True, True]])
            >>> m.row(0)
            ([0], Window(left=1, right=0))
        """
        cs = [c for c, m in enumerate(self.blocks[a]) if m is not None]
        if not cs:
            return [], None
        if len(cs) == 1:
            m = self.blocks[a][cs[0]]
            assert m is not None
            return cs, m if self.lengths is None else m & Padding(self.lengths[:, cs[0]])
        col_lengths = None if self.lengths is None else self.lengths[:, cs]
        blocks = (tuple(self.blocks[a][c] for c in cs),)
        return cs, _Blocks((self.sizes[a],), tuple(self.sizes[c] for c in cs), blocks, None, col_lengths)

    def row_over_all(self, a: int) -> Mask | None:
        """The mask of query segment ``a``'s queries over **all** the keys, in their own places (the
        blocks of unlinked segments empty): the inputs' keys as they are, never copied together
        (compare :meth:`row`), for kernels whose cost follows the allowed pairs; ``None`` when it
        attends none.

        Examples:
            >>> from attnmm.masks import Causal, Segments, Window
            >>> links = [[True, False, True], [True, True, False], [True, True, True]]
            >>> m = Segments([3, 2, 1], within=[Window(1, 0), Causal(), None], links=links)
            >>> m.row_over_all(0).dense(3, 6).int()
            tensor([[1, 0, 0, 0, 0, 1],
                    [1, 1, 0, 0, 0, 1],
                    [0, 1, 1, 0, 0, 1]], dtype=torch.int32)
        """
        if all(m is None for m in self.blocks[a]):
            return None
        return _Blocks((self.sizes[a],), self.sizes, (self.blocks[a],), None, self.lengths)

    def __repr__(self) -> str:
        text = f"Segments(sizes={list(self.sizes)}"
        if any(m is not None for m in self.within):
            text += ", within=[" + ", ".join(repr(m) for m in self.within) + "]"
        if isinstance(self.links, str):
            text += f", links={self.links!r}" if self.links != "none" else ""
        else:
            text += ", links=[" + ", ".join(
                "[" + ", ".join(repr(x) if isinstance(x, Mask) else str(int(x)) for x in r) + "]" for r in self.links
            ) + "]"
        if self.lengths is not None:
            text += f", batch={self.lengths.size(0)}"
        return text + ")"


def _layout(sizes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Offsets (K + 1,) of segments of ``sizes``, and the segment of every position (K past the
    end), (total + 1,)."""
    offsets = torch.tensor([0, *sizes], dtype=torch.long).cumsum(0)
    segment = torch.repeat_interleave(torch.arange(len(sizes) + 1), torch.tensor([*sizes, 1]))
    return offsets, segment


def _check_part(name: str, m: object) -> None:
    if m is None:
        return
    if not isinstance(m, Mask):
        raise TypeError(f"{name} must be a Mask or None, got {type(m).__name__}")
    if m.layout == "packed":
        raise TypeError(f"{name} is {m!r}, a mask of the packed node layout; segments use the padded layout")


def _link_table(links: object, num_segments: int) -> list[list[Link]]:
    """The K x K table (K = ``num_segments``) of ``links`` ("none", "full" or a table), checked."""
    K = num_segments
    if isinstance(links, str):
        if links not in ("none", "full"):
            raise ValueError(f"links must be 'none', 'full' or a {K} x {K} table, got {links!r}")
        return [[a == c or links == "full" for c in range(K)] for a in range(K)]
    if not isinstance(links, Sequence) or len(links) != K or any(
        not isinstance(r, Sequence) or len(r) != K for r in links
    ):
        raise ValueError(
            f"links must be 'none', 'full' or a {K} x {K} table (one row per query segment), got {links!r}"
        )
    for a, r in enumerate(links):
        for c, x in enumerate(r):
            if not isinstance(x, (bool, Mask)):
                raise TypeError(f"links[{a}][{c}] must be True, False or a Mask, got {type(x).__name__} {x!r}")
            if isinstance(x, Mask):
                _check_part(f"links[{a}][{c}]", x)
    return [list(r) for r in links]


def _check_lengths(lengths: Tensor | Sequence[Sequence[int]], sizes: tuple[int, ...]) -> Tensor:
    shape = f"(B, K) = (B, {len(sizes)})"
    if not isinstance(lengths, Tensor) and len(lengths) == 0:  # an empty batch
        lengths = torch.zeros(0, len(sizes), dtype=torch.long)
    lengths = check_lengths(lengths, shape, 2).detach().cpu()
    if lengths.size(1) != len(sizes):
        raise ValueError(f"lengths must have shape {shape}, got shape {tuple(lengths.shape)}")
    if bool((lengths > torch.tensor(sizes, dtype=torch.long)).any()):
        raise ValueError(f"lengths must lie between 0 and each segment's size {list(sizes)}, got {lengths.tolist()}")
    return lengths


__all__ = ["Link", "Segments"]
