"""Hypothesis strategies for masks and attention problems, shared by the test modules."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, Window


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
