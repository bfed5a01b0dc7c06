"""Hypothesis strategies for masks and attention problems, shared by the test modules."""

from __future__ import annotations

import itertools

import torch
from hypothesis import strategies as st

from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Mask, Padding, SameGraph, Segments, Window


@st.composite
def lengths(draw: st.DrawFn, batch_size: int, num_cols: int) -> Padding:
    values = draw(st.lists(st.integers(0, num_cols), min_size=batch_size, max_size=batch_size))
    return Padding(torch.tensor(values, dtype=torch.long))


@st.composite
def sequence_masks(draw: st.DrawFn, batch_size: int, num_cols: int, depth: int = 2) -> Mask:
    """A mask of the padded layout for any (L, S): a base mask or a composition of them."""
    base = st.one_of(
        st.just(Full()),
        st.just(Causal()),
        st.builds(Window, st.integers(0, 4), st.integers(0, 4)),
        st.builds(Chunk, st.integers(1, 4), st.integers(0, 2)),
        lengths(batch_size, num_cols),
    )
    mask = draw(base)
    for _ in range(draw(st.integers(0, depth))):
        op = draw(st.sampled_from(["&", "|", "~"]))
        other = draw(base)
        mask = mask & other if op == "&" else mask | other if op == "|" else ~mask
    return mask


@st.composite
def grid_masks(draw: st.DrawFn, batch_size: int) -> tuple[Mask, int]:
    """A Grid mask (maybe composed with padding) and its number of patches."""
    h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    kernel = draw(st.sampled_from([1, 3, 5]))
    dilation = draw(st.integers(1, 2))
    border = "truncate"
    if kernel * dilation <= min(h, w) and draw(st.booleans()):
        border = "shift"
    mask: Mask = Grid(h, w, kernel, dilation, border=border)
    if draw(st.booleans()):
        mask = mask & draw(lengths(batch_size, h * w))
    return mask, h * w


@st.composite
def graph_masks(draw: st.DrawFn) -> tuple[Graph, int, int]:
    """A random directed (maybe bipartite) graph mask with duplicates and isolated nodes."""
    num_dst = draw(st.integers(1, 9))
    num_src = draw(st.one_of(st.just(num_dst), st.integers(1, 9)))
    m = draw(st.integers(0, 3 * max(num_src, num_dst)))
    src = draw(st.lists(st.integers(0, num_src - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, num_dst - 1), min_size=m, max_size=m))
    edge_index = torch.tensor([src, dst], dtype=torch.long).view(2, m)
    nodes = num_dst if num_src == num_dst else (num_src, num_dst)
    return Graph(edge_index, nodes), num_dst, num_src


@st.composite
def same_graph_masks(draw: st.DrawFn, num_nodes: int | None = None) -> tuple[SameGraph, int]:
    """Full attention inside each graph of a packed batch of 1-4 graphs (``num_nodes`` nodes, 1-9 when
    not given), with graphs of one node; the mask and its node count."""
    n = draw(st.integers(1, 9)) if num_nodes is None else num_nodes
    cuts = sorted(draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=3))) if n > 1 else []
    batch = torch.zeros(n, dtype=torch.long)
    for c in cuts:
        batch[c:] += 1
    return SameGraph(batch), n


@st.composite
def documents_masks(draw: st.DrawFn, batch_size: int, num_tokens: int) -> Mask:
    """Documents packed into at most ``num_tokens`` positions, shared by the batch (D,) or per item
    (B, D), with empty documents, maybe composed with Causal, a Window or Padding."""
    batched = draw(st.booleans())
    count = draw(st.integers(0, 4))
    table = []
    for _ in range(batch_size if batched else 1):
        row, total = [], 0
        for n in draw(st.lists(st.integers(0, 4), min_size=count, max_size=count)):
            row.append(min(n, num_tokens - total))
            total += row[-1]
        table.append(row)
    mask: Mask = Documents(table if batched else table[0])
    extra = draw(
        st.one_of(
            st.none(),
            st.just(Causal()),
            st.builds(Window, st.integers(0, 3), st.integers(0, 3)),
            lengths(batch_size, num_tokens),
        )
    )
    if extra is not None:
        mask = mask & extra if draw(st.booleans()) else extra & mask
    return mask


@st.composite
def _segment(draw: st.DrawFn, batch_size: int, size: int | None = None) -> tuple[int, Mask | None]:
    """One segment: its size (drawn unless given) and the mask within it."""
    kinds = ["full", "causal", "window", "chunk", "padding", "documents"] + (["grid"] if size is None else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "grid":
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        return h * w, Grid(h, w, draw(st.sampled_from([1, 3])))
    if size is None:
        size = draw(st.integers(0, 4))
    if kind == "padding":
        return size, draw(lengths(batch_size, size))
    if kind == "documents":
        return size, draw(documents_masks(batch_size, size))
    within = {
        "full": st.none(),
        "causal": st.just(Causal()),
        "window": st.builds(Window, st.integers(0, 2), st.integers(0, 2)),
        "chunk": st.builds(Chunk, st.integers(1, 3), st.integers(0, 1)),
    }[kind]
    return size, draw(within)


@st.composite
def segments_masks(
    draw: st.DrawFn, batch_size: int, length: int | None = None, composed: bool = True
) -> tuple[Mask, int]:
    """A Segments mask of 1 to 3 segments (grids, windows, causal text, packed documents, ...) linked
    by none, full or a table of links (some of them masks), maybe with per-item lengths (0: missing),
    and its length L (``length`` when given: the segments split it); now and then composed with
    Padding (unless not ``composed``)."""
    count = draw(st.integers(1, 3))
    if length is None:
        drawn = [draw(_segment(batch_size)) for _ in range(count)]
    else:
        cuts = sorted(draw(st.lists(st.integers(0, length), min_size=count - 1, max_size=count - 1)))
        bounds = [0, *cuts, length]
        drawn = [draw(_segment(batch_size, hi - lo)) for lo, hi in itertools.pairwise(bounds)]
    sizes = [n for n, _ in drawn]
    kind = draw(st.sampled_from(["none", "full", "table"]))
    links: object = kind
    if kind == "table":
        entry = st.one_of(st.booleans(), st.just(Full()), st.builds(Window, st.integers(0, 2), st.integers(0, 2)))
        links = [
            [draw(st.booleans()) if a == c else draw(entry) for c in range(len(sizes))] for a in range(len(sizes))
        ]
    per_item = None
    if draw(st.booleans()):
        per_item = [[draw(st.integers(0, n)) for n in sizes] for _ in range(batch_size)]
    mask: Mask = Segments(sizes, [m for _, m in drawn], links, per_item)  # type: ignore[arg-type]
    total = sum(sizes)
    if composed and draw(st.integers(0, 4)) == 0:
        mask = mask & draw(lengths(batch_size, total))
    return mask, total
