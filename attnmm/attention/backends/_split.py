r"""Attention under a mask made of blocks (:func:`~attnmm.masks.as_blocks`: a :class:`~attnmm.masks.Segments`
mask, packed documents, their intersections), split into its query segments before dispatch, each computed on
its own backend, as :class:`~attnmm.attention.backends.SegmentsBackend` describes, in one autograd node
(:class:`SplitAttention`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor
from torch.autograd.graph import get_gradient_edge

from attnmm.attention.backends._memory import MemoryReader, check_backend, check_pairs
from attnmm.attention.backends.base import Backend
from attnmm.attention.forms import Forms
from attnmm.attention.problem import GradSinks, Inputs, Problem
from attnmm.masks import Mask, Segments

#: How a query segment reads its keys: those of one segment, all the keys in their places, or the keys of
#: several segments laid one after another (a copy).
Keys = Literal["one", "all", "together"]


@dataclass(frozen=True)
class Row:
    """One query segment's attention, as dispatch chose to compute it.

    Attributes:
        segment (int): the query segment a.
        keys (str): ``"one"``, ``"all"`` or ``"together"`` (see :data:`Keys`).
        linked (tuple[int, ...]): the key segments :math:`C_a` it reads.
        mask (Mask): the mask of its queries over those keys.
        backend (Backend): the backend dispatch chose for it.
        cost (float, optional): that backend's estimate.
        forms (Forms): the derived forms of its mask (with its own split, when its mask is made of blocks
            too), shared by every run of the row.
    """

    segment: int
    keys: Keys
    linked: tuple[int, ...]
    mask: Mask
    backend: Backend
    cost: float | None
    forms: Forms


@dataclass(frozen=True)
class Split:
    """A problem's query segments and how each is computed (``None``: it attends nothing)."""

    blocks: Segments
    rows: tuple[Row | None, ...]

    @property
    def cost(self) -> float | None:
        """The sum of the rows' estimates (``None`` when one has none)."""
        costs = [row.cost for row in self.rows if row is not None]
        return None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))


def sub_problem(problem: Problem, rows: int, keys: int, mask: Mask) -> Problem:
    """A problem of ``rows`` of ``problem``'s queries over ``keys`` keys under ``mask``, with ``problem``'s
    options (no bias, no weights returned, the padded layout)."""
    return replace(problem, L=rows, S=keys, mask=mask, structure=mask.structure, has_bias=False,
                   return_weights=False, packed=False)


def row_problem(problem: Problem, split: Split, row: Row) -> Problem:
    """``row``'s problem: its queries over the keys it reads."""
    sizes = split.blocks.sizes
    width = problem.S if row.keys == "all" else sum(sizes[c] for c in row.linked)
    return sub_problem(problem, sizes[row.segment], width, row.mask)


def _keys(split: Split, row: Row, t: Tensor) -> Tensor:
    """The keys (or values) ``row`` reads from ``t`` (B, H, S, E)."""
    if row.keys == "all":
        return t
    offsets = split.blocks.offsets
    parts = [t[:, :, offsets[c] : offsets[c + 1]] for c in row.linked]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)  # (B, H, S_a, E)


def _key_rows(split: Split, row: Row, t: Tensor) -> Tensor | None:
    """The view of ``t`` (B, H, S, E), a gradient of all the keys (or values), that holds ``row``'s
    keys as it reads them (:func:`_keys`); ``None`` when it reads them laid together (a copy)."""
    if row.keys == "all":
        return t
    if len(row.linked) > 1:
        return None
    offsets, c = split.blocks.offsets, row.linked[0]
    return t[:, :, offsets[c] : offsets[c + 1]]


def _add_keys(split: Split, row: Row, into: Tensor, grad: Tensor) -> None:
    """Add ``row``'s gradient of its keys (or values) into the gradient ``into`` of all of them."""
    if row.keys == "all":
        into += grad
        return
    offsets, start = split.blocks.offsets, 0
    for c in row.linked:
        n = offsets[c + 1] - offsets[c]
        into[:, :, offsets[c] : offsets[c + 1]] += grad[:, :, start : start + n]
        start += n


def _run_row(
    problem: Problem, split: Split, row: Row, q: Tensor, k: Tensor, v: Tensor, sinks: GradSinks | None = None
) -> Tensor:
    """``row``'s output (B, H, n_a, Ev) from its queries ``q`` and its keys and values ``k``, ``v``
    (:func:`_keys`), its padded queries 0."""
    blocks = split.blocks
    sub = row_problem(problem, split, row)
    reader = MemoryReader()
    check_pairs(sub, with_bias=False, reader=reader)
    check_backend(sub, row.forms, row.backend, reader=reader)
    out, _ = row.backend.forward(sub, row.forms, Inputs(q, k, v, sinks=sinks))  # (B, H, n_a, Ev)
    if blocks.lengths is not None:  # the segment's padded queries attend nothing
        n = blocks.sizes[row.segment]
        real = torch.arange(n, device=q.device) < blocks.lengths[:, row.segment].to(q.device).view(-1, 1)  # (B, n_a)
        out = torch.where(real.view(problem.B, 1, n, 1), out, out.new_zeros(()))
    return out


class SplitAttention(torch.autograd.Function):
    """The output of a split problem, one autograd node for all its query segments.

    Forward runs each segment's backend on its own inputs (detached leaves when a gradient is wanted,
    so each segment's graph stays its own); backward walks the segments one at a time, asks each graph
    for its gradients and lets that segment's graph go. The gradients of all segments meet in one
    buffer per input: a backend that can (:attr:`~attnmm.attention.backends.base.Backend.accumulates`)
    adds its part straight into the buffer's rows for that segment (:class:`GradSinks`), the others'
    parts are added after they come back. Those others go first, so that the first one whose gradient
    covers a whole input (a segment that reads every key) becomes that input's buffer rather than
    being added into a new one: no segment's full-size gradient is ever in flight beside the buffer.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, problem: Problem, split: Split) -> Tensor:
        B, H, Ev = problem.B, problem.H, v.size(-1)
        offsets = split.blocks.offsets
        ctx.split, ctx.graphs = split, []
        outs = []
        for a, row in enumerate(split.rows):
            n = offsets[a + 1] - offsets[a]
            if row is None:
                outs.append(v.new_zeros(B, H, n, Ev))
                ctx.graphs.append(None)
                continue
            inputs = (q[:, :, offsets[a] : offsets[a + 1]], _keys(split, row, k), _keys(split, row, v))
            # the row's own inputs, cut from the graph: its gradients come out the row's size
            leaves = [t.detach().requires_grad_(needs) for t, needs in zip(inputs, ctx.needs_input_grad)]
            sinks = GradSinks() if row.backend.accumulates else None
            with torch.enable_grad():
                out = _run_row(problem, split, row, leaves[0], leaves[1], leaves[2], sinks=sinks)
            # the graph is kept by its edge alone: the row's output goes once it is copied into the whole
            ctx.graphs.append((get_gradient_edge(out), leaves, sinks) if out.requires_grad else None)
            outs.append(out.detach())
            del out
        ctx.shapes = (q.shape, k.shape, v.shape)
        ctx.token_major = tuple(not t.is_contiguous() and t.transpose(1, 2).is_contiguous() for t in (q, k, v))
        return torch.cat(outs, dim=2) if outs else v.new_zeros(B, H, 0, Ev)  # (B, H, L, Ev)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        split = ctx.split
        offsets = split.blocks.offsets
        wanted = ctx.needs_input_grad[:3]
        grads: list[Tensor | None] = [None, None, None]  # d_q, d_k, d_v, each made when first needed

        def laid_out(i: int, g: Tensor | None = None) -> Tensor:
            """A gradient of input ``i`` in that input's memory layout (B, H, n, E) or (B, n, H, E), so
            that autograd hands it on without a copy: ``g`` moved there when it lies otherwise, else 0."""
            B, H, n, E = ctx.shapes[i]
            token = ctx.token_major[i]
            if g is not None and (g.transpose(1, 2).is_contiguous() if token else g.is_contiguous()):
                return g
            t = d_out.new_empty(B, n, H, E).transpose(1, 2) if token else d_out.new_empty(B, H, n, E)
            return t.zero_() if g is None else t.copy_(g)

        def buffer(i: int) -> Tensor:
            made = grads[i]
            if made is None:
                made = grads[i] = laid_out(i)
            return made

        def region(i: int, a: int, row: Row, t: Tensor) -> Tensor | None:
            """The rows of the whole gradient ``t`` of input ``i`` that segment ``a`` reads."""
            return t[:, :, offsets[a] : offsets[a + 1]] if i == 0 else _key_rows(split, row, t)

        def turn(a: int) -> tuple[bool, bool]:
            """The segments whose backend returns its gradients first, those reading every key first
            among them; those that add into the buffers last."""
            graph, row = ctx.graphs[a], split.rows[a]
            return (graph is not None and graph[2] is not None, row is None or row.keys != "all")

        for a in sorted(range(len(split.rows)), key=turn):
            graph, row = ctx.graphs[a], split.rows[a]
            ctx.graphs[a] = None  # this segment's saved tensors go as soon as its gradients are out
            if graph is None or row is None:
                continue
            edge, leaves, sinks = graph
            if sinks is not None:
                sinks.q, sinks.k, sinks.v = (region(i, a, row, buffer(i)) if wanted[i] else None for i in range(3))
            inputs = [t for t, need in zip(leaves, wanted) if need]
            returned = torch.autograd.grad(edge, inputs, d_out[:, :, offsets[a] : offsets[a + 1]], allow_unused=True)
            del graph, edge, leaves
            if sinks is not None:
                sinks.clear()
            given = iter(returned)
            row_grads = [next(given) if need else None for need in wanted]
            del given, returned
            for i in (1, 2, 0):  # (the keys' and values' first: the queries' buffer is made last)
                g, row_grads[i] = row_grads[i], None  # (each goes as soon as it is in place)
                if g is None:
                    continue
                whole = g.shape == ctx.shapes[i] and ((i > 0 and row.keys == "all") or (i == 0 and offsets[a] == 0))
                own = g.untyped_storage().data_ptr() != d_out.untyped_storage().data_ptr()
                if grads[i] is None and whole and own:
                    # the first whole gradient of its own is the buffer itself (moved once to the input's
                    # layout if it lies otherwise, now while little else is in flight)
                    grads[i] = laid_out(i, g)
                elif i == 0:
                    buffer(0)[:, :, offsets[a] : offsets[a + 1]] += g
                else:
                    _add_keys(split, row, buffer(i), g)
                del g
        return (*(buffer(i) if wanted[i] else None for i in range(3)), None, None)


__all__ = ["Keys", "Row", "Split", "SplitAttention", "row_problem", "sub_problem"]
