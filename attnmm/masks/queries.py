r"""What a mask's consumers ask of it, answered from its :class:`~attnmm.masks.Structure` alone: a leaf from
its own numbers, a composition (``op`` and ``parts``) from its parts' answers. A mask written anywhere
answers by filling its structure; no consumer tests for a mask class.

Examples:
    >>> from attnmm.masks import Causal, Chunk, Padding, Window
    >>> m = Chunk(4, 1) & Window(2, 3) & Padding([5, 7])
    >>> lookahead_error(m, 4) is None, first_key(m, 12), block_sizes(m), padding_lengths(m).tolist()
    (True, 10, frozenset({4}), [5, 7])
    >>> without_padding(m)
    Chunk(size=4, left_chunks=1) & Window(left=2, right=3)
"""

from __future__ import annotations

from functools import reduce
from operator import and_

import torch
from torch import Tensor

from attnmm.masks.base import Full, Mask, Not, Or
from attnmm.masks.segments import Segments


def _real(parts: tuple[Mask, ...] | list[Mask]) -> list[Mask]:
    """The parts that restrict anything (a full unbatched part allows every key)."""
    return [p for p in parts if p.structure.kind != "full" or p.batched]


def first_key(mask: Mask, end: int) -> int | None:
    """A lower bound on the keys that any query at position ``end`` or later may attend (keys before it
    can be forgotten by a stream), or ``None`` when such a query may attend any earlier key: from a
    chunk's start, else from the ``left`` bound; an ``&`` takes its parts' largest, an ``|`` their
    smallest."""
    s = mask.structure
    if s.op is not None:
        keys = [None if s.op == "~" else first_key(p, end) for p in s.parts]
        if s.op == "&":
            known = [k for k in keys if k is not None]
            return max(known) if known else None
        return None if any(k is None for k in keys) else min(k for k in keys if k is not None)
    if s.left is None:
        return None
    if s.chunk is not None:  # the earliest chunk a later query still sees
        return max(0, (end // s.chunk - (s.left + 1) // s.chunk + 1) * s.chunk)
    return max(0, end - s.left)


def lookahead_error(mask: Mask, step: int) -> str | None:
    """``None`` when no query attends a key at or past the end of its block of ``step`` positions
    (blocks start at multiples of ``step``), so a stream may emit a block once it has arrived; else why
    not, naming the mask at fault. One bounded part bounds an ``&``; an ``|`` needs every part bounded."""
    s = mask.structure
    if s.op == "~":
        return f"{mask!r} is a complement, which may allow any later position"
    if s.op is not None:
        reasons = [r for p in s.parts if (r := lookahead_error(p, step)) is not None]
        if s.op == "|" or len(reasons) == len(s.parts):
            return (reasons[0] if s.op == "|" else "; ".join(reasons)) if reasons else None
        return None
    if s.chunk is not None:
        ok = step % s.chunk == 0
        return None if ok else f"{mask!r} ends its chunks at multiples of {s.chunk}, not of {step}"
    if s.right == 0:
        return None
    if s.right is None:
        return f"{mask!r} states no bound on how far ahead a query may look"
    return (
        f"{mask!r} lets query i attend key i + {s.right}, across block boundaries, and each layer adds "
        f"that look-ahead again (num_layers x {s.right} positions), so it grows with depth"
    )


def block_sizes(mask: Mask) -> frozenset[int]:
    """Lengths of the blocks whose ends bound the look-ahead (its chunks' sizes); a stream steps by a
    multiple of them."""
    s = mask.structure
    own = frozenset() if s.chunk is None else frozenset({s.chunk})
    return own.union(*(block_sizes(p) for p in s.parts))


def padding_lengths(mask: Mask) -> Tensor | None:
    """The real length of every batch item (B,) when the mask allows no key at or past it (its key
    padding; an ``&``'s smallest), else ``None``."""
    s = mask.structure
    if s.op != "&":
        return s.lengths if s.op is None else None
    known = [n for p in s.parts if (n := padding_lengths(p)) is not None]
    return reduce(torch.minimum, known) if known else None


def without_padding(mask: Mask) -> Mask:
    """The mask on a batch whose every token is real: key padding dropped (``Padding`` becomes
    ``Full()``)."""
    s = mask.structure
    if s.op is None:
        return Full() if s.lengths is not None else mask
    parts = [without_padding(p) for p in s.parts]
    if s.op == "~":
        return Not(parts[0])
    kept = _real(parts)
    if s.op == "|":
        return Full() if len(kept) < len(parts) else Or(*parts)
    return reduce(and_, kept) if kept else Full()


def grid_size(mask: Mask) -> tuple[int, int] | None:
    """``(height, width)`` of the patch grid the mask is over (patches row-major), or ``None``."""
    s = mask.structure
    return s.grid if s.grid is not None else next((g for p in s.parts if (g := grid_size(p)) is not None), None)


def grid_window(mask: Mask) -> tuple[int, int] | None:
    """``(kernel, dilation)`` when the mask is exactly a zero-padded convolution's receptive field on
    its grid (a ``Grid`` with truncated borders, maybe intersected with full masks), else ``None``."""
    s = mask.structure
    if s.op == "&":
        core = _real(s.parts)
        return grid_window(core[0]) if len(core) == 1 else None
    return s.window if s.op is None else None


def segmentation(mask: Mask) -> tuple[tuple[int, ...], Tensor | None] | None:
    """``(sizes, lengths)`` of the segments the mask lays out (``lengths`` (B, K) or ``None`` when every
    segment is whole; an ``&`` with one such part: that part's), or ``None`` for one sequence."""
    s = mask.structure
    if s.op == "&":
        found = [x for p in s.parts if (x := segmentation(p)) is not None]
        return found[0] if len(found) == 1 else None
    return s.segments if s.op is None else None


def as_blocks(mask: Mask, num_rows: int, num_cols: int) -> Segments | None:
    """The mask as a :class:`~attnmm.masks.Segments` mask over ``num_rows`` x ``num_cols`` positions when
    it is made of blocks that can be computed one by one, else ``None``: a ``Segments`` mask, one
    packing of documents shared by the batch (a segment per non-empty document attending itself, and a
    last one attending nothing for the positions past them), and an ``&`` with one such part (its
    blocks, each intersected with the other parts seen from the block's offsets).

    Examples:
        >>> from attnmm.masks import Causal, Documents
        >>> as_blocks(Documents([2, 0, 3]), 6, 6)
        Segments(sizes=[2, 3, 1], links=[[1, 0, 0], [0, 1, 0], [0, 0, 0]])
    """
    s = mask.structure
    if s.op == "&":
        for i, part in enumerate(s.parts):
            blocks = as_blocks(part, num_rows, num_cols)
            if blocks is not None:
                others = [p for j, p in enumerate(s.parts) if j != i]
                return blocks.intersect_blocks(reduce(and_, others)) if others else blocks
        return None
    if s.op is not None:
        return None
    if s.segments is not None:
        return mask if num_rows == num_cols == sum(s.segments[0]) else None  # type: ignore[return-value]
    if s.documents is None or num_rows != num_cols:
        return None
    sizes = [int(n) for n in s.documents.tolist() if n > 0]
    tail = num_rows - sum(sizes)
    if tail < 0:
        return None  # (the mask's own check refuses the length)
    docs = len(sizes)
    if tail:
        sizes.append(tail)  # the positions past the documents: a last segment attending nothing
    links = [[a == c < docs for c in range(len(sizes))] for a in range(len(sizes))]
    return Segments(sizes, links=links) if sizes else None


__all__ = ["as_blocks", "block_sizes", "first_key", "grid_size", "grid_window", "lookahead_error", "padding_lengths",
           "segmentation", "without_padding"]
