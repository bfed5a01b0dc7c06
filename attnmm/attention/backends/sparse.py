r"""The sparse backend: segment softmax over the allowed pairs in CSR form, O(nnz) time and memory."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnmm.attention.backends._csr import (
    Blocks,
    CSRPattern,
    as_heads_second,
    expand,
    head_major,
    result_order,
    sampled,
    segment_max,
    segment_sum,
    spmm,
)
from attnmm.attention.backends._sizes import PAIR_BYTES, compute_bytes, max_pairs, output_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms, FormStore
from attnmm.attention.problem import GradSinks, Inputs, Problem

#: Bytes of the CSR pattern per pair: the columns, the rows of the transpose and the permutation between
#: them (int64 when a problem needs it), and the pointers' share.
PATTERN_BYTES = 32


def pattern(forms: Forms, store: FormStore | None = None) -> CSRPattern:
    """The CSR pattern of the mask's pairs (its ``forms``), shared by the heads (and by the batch items of a
    mask shared by the batch); kept instead of the pairs, which it holds (across calls in ``store`` when the
    plan has none)."""
    return forms.form("pattern", lambda f: CSRPattern.from_pairs(f.pairs(keep=False)), drop="pairs", store=store)


class SparseBackend(Backend):
    r"""Attention over an arbitrary mask, costing O(nnz) time and memory.

    The allowed pairs, sorted by query, are the CSR pattern of the score matrix. Per head,

    .. math::
        s_p = \mathbf{q}_{i}^\top \mathbf{k}_{j} \cdot \mathrm{scale} + b_p, \quad
        a_p = \frac{\exp(s_p - m_i)}{\sum_{p' \in \mathrm{row}(i)} \exp(s_{p'} - m_i)}, \quad
        \mathbf{o}_i = \sum_{p \in \mathrm{row}(i)} a_p \mathbf{v}_j

    for each pair :math:`p = (i, j)`, with the row maximum :math:`m_i` subtracted. Scores come from a
    sampled dense-dense product and outputs from a CSR @ dense product; the backward pass is written
    by hand with the same two kernels (:math:`\partial a = \mathrm{sampled}(\partial O, V)`,
    :math:`\partial s = a \odot (\partial a - \sum_{\mathrm{row}} a\,\partial a)`,
    :math:`\partial Q = \partial S\, K`, :math:`\partial K = \partial S^\top Q`,
    :math:`\partial V = A^\top \partial O`). Only (H, nnz) values are kept; keys and values are never
    copied per pair. The pattern is kept once, shared by the heads (and by the batch items of a mask
    shared by the batch): O(nnz) integers whatever H. Each (batch item, head) block is one kernel call
    on 2-D views of the operands as they lie in memory, so (B, L, H, E) inputs such as packed
    (N, H, E) node features, (B, H, L, E) inputs, and query segments sliced from a longer sequence are
    all used without copies. Half-precision inputs are computed in float32.

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Graph
        >>> edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])  # (2, M): source -> target
        >>> q = k = v = torch.randn(3, 2, 8)  # packed (N, H, E)
        >>> out, w = attend(q, k, v, Graph(edge_index, 3), backend="sparse", return_weights=True)
        >>> out.shape, w.values.shape
        (torch.Size([3, 2, 8]), torch.Size([4, 2]))
    """

    name = "sparse"
    supports = Supports()  # every mask and option
    accumulates = True  # (its backward adds into a problem's gradient sinks, head by head)
    preference = 60  # after the reference for dense masks (the reference ranks last for sparse ones)

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        """O(nnz * H): the mask's allowed pairs and their CSR pattern (five indices per pair, shared by
        the heads), and about eight values per pair, head and batch item (scores, weights and their
        gradients); 0 when the mask cannot bound its pair count."""
        pairs = max_pairs(problem)
        if pairs is None:
            return 0
        values = pairs * problem.B if problem.batch_size is None else pairs  # a shared mask's pairs per item
        per_value = problem.H * 8 * compute_bytes(problem.dtype)
        return pairs * (PAIR_BYTES + PATTERN_BYTES) + values * per_value + output_bytes(problem)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...]:
        """Multiply-adds per allowed pair and head, the pairs' per-head values, the query rows, and
        the pairs times the mean keys per query row.

        The last term models what a per-pair constant cannot: measured on CPU (one thread, H = 2,
        E = 64, forward + backward, ``Documents(n) & Causal()``), the time per pair grows with the
        keys per row: about 89 ns at n = 128, 145 ns at n = 512 and 460 ns at n = 2,048 (the
        calibration fits its constant with long-row problems).
        """
        forms.form("counts", lambda forms: forms.row_counts, store=self.store)  # (kept for equal masks)
        pairs = forms.allowed_pairs(problem.B) * problem.H
        rows = problem.B * problem.H * problem.L
        per_row = pairs / rows if rows else 0.0
        return float(pairs * (problem.E + problem.Ev)), float(pairs), float(rows), float(pairs * per_row)

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        q, k, v = inputs.q, inputs.k, inputs.v
        B, H = problem.B, problem.H
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        blocks = Blocks(pattern(forms, self.store), B, H)
        bias = None
        if inputs.bias is not None:
            bias = inputs.bias.to(compute).t()  # (H, P), a view
            if not blocks.pattern.batched and B > 1:
                bias = bias.repeat(1, B)  # (H, B * P), shared over the batch
        # the operands are used as they lie in memory; the output comes back (B, H, L, Ev) or (H, B, L, Ev)
        sinks = inputs.sinks if q.dtype == compute else None  # (a gradient computed in float32 is returned)
        q, k, v = (t.to(compute) for t in (q, k, v))
        out, weights = _SegmentAttention.apply(q, k, v, bias, blocks, problem.scale, problem.score, problem.dropout_p,
                                               sinks)
        out = as_heads_second(out, result_order(blocks, v)).to(inputs.v.dtype)  # (B, H, L, Ev)
        if not problem.return_weights:
            return out, None
        return out, weights.t().to(problem.dtype)  # (V, H) at forms.weight_pairs(problem.B)


class _SegmentAttention(torch.autograd.Function):
    """Segment-softmax attention over a CSR pattern shared by the heads: q (B, H, L, E), k (B, H, S, E),
    v (B, H, S, Ev), bias (H, V) or None -> out (B, H, L, Ev) in the memory order :func:`spmm` writes it
    (:func:`~attnmm.attention.backends._csr.result_order`), and the weights after dropout (H, V), values in
    the pattern's order (see :mod:`~attnmm.attention.backends._csr`)."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, blocks: Blocks, scale: float, score: str,
        dropout_p: float, sinks: GradSinks | None = None,
    ) -> tuple[Tensor, Tensor]:
        # under gradient sinks (a query segment of a split problem, whose caller bounds its memory) the
        # weights are not kept: the backward recomputes them head by head from each row's log-sum-exp
        recompute = sinks is not None
        a: Tensor | None
        lse: Tensor | None
        keep: Tensor | None = None
        if recompute and score == "softmax" and dropout_p == 0:
            # nothing needs the weights themselves: the rows of the output are divided by their sums
            # instead of every pair's exponential
            e, m, z = _exponentials(blocks, q, k, bias, scale)
            out, ctx.order = spmm(blocks, e, v)
            per_row = torch.where(z > 0, z, torch.ones_like(z)).view(z.size(0), blocks.batch, -1, 1)  # (h, B, L, 1)
            as_heads_second(out, ctx.order).div_(per_row.transpose(0, 1))
            a, weights, lse = None, e.new_empty(0), m.add_(z.log_())
            del e
        else:
            a, lse = _weights(blocks, q, k, bias, scale, score)
            weights = a
            if dropout_p > 0:
                keep = torch.rand_like(a) >= dropout_p
                weights = a * keep / (1.0 - dropout_p)
            # the output is returned as the tensor it is written in, not as a view (autograd refuses in-place
            # edits of a view returned by a function with several outputs)
            out, ctx.order = spmm(blocks, weights, v)
        ctx.set_materialize_grads(False)
        if recompute:
            blocks.__dict__.pop("value_rows", None)  # (an index per value: the backward makes it again)
        ctx.save_for_backward(q, k, v, None if recompute else a, keep, lse if recompute else None,
                              bias if recompute else None)
        ctx.blocks, ctx.scale, ctx.score, ctx.dropout_p = blocks, scale, score, dropout_p
        ctx.has_bias, ctx.sinks = bias is not None, sinks
        return out, weights

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, a, keep, lse, bias = ctx.saved_tensors
        blocks: Blocks = ctx.blocks
        if d_out is None:
            d_out = v.new_zeros(q.shape[:-1] + v.shape[-1:])
        else:
            d_out = as_heads_second(d_out, ctx.order)  # (B, H, L, Ev)
        need_q, need_k, need_v, need_bias = ctx.needs_input_grad[:4]
        need_bias = need_bias and ctx.has_bias
        # where each input's gradient goes: the caller's sink (added into, then None is returned for it),
        # or a tensor of its own, written head by head (or, all heads in one call, made by that call)
        sinks: GradSinks = ctx.sinks or GradSinks()
        heads = [slice(None)] if blocks.fused else [slice(h, h + 1) for h in range(blocks.heads)]
        sub = blocks if blocks.fused else blocks.one_head()
        targets: dict[str, tuple[Tensor | None, bool]] = {}
        for name, t, need, sink, rows, operand in (
            ("q", q, need_q, sinks.q, blocks.pattern.num_rows, k),
            ("k", k, need_k, sinks.k, blocks.pattern.num_cols, q),
            ("v", v, need_v, sinks.v, blocks.pattern.num_cols, d_out),
        ):
            if not need:
                continue
            if sink is not None and sink.shape == t.shape and sink.dtype == t.dtype:
                targets[name] = (sink, True)
            else:
                targets[name] = (None if blocks.fused else _result(blocks, operand, rows, t.size(-1)), False)

        def product(name: str, values: Tensor, y: Tensor, transpose: bool, hs: slice, alpha: float = 1.0) -> None:
            into, add = targets[name]
            if into is None:
                targets[name] = (as_heads_second(*spmm(sub, values, y, transpose, alpha=alpha)), False)
            else:
                spmm(sub, values, y, transpose, into=into[:, hs], add=add, alpha=alpha)

        d_bias = q.new_empty(blocks.heads, blocks.width) if need_bias else None
        # larger problems run head by head, so that at most three (1, V) values of one head are in flight
        # beside the saved weights (or none: they are recomputed head by head)
        for hs in heads:
            if a is None:
                b_h = None if bias is None else bias[hs]
                lse_h = None if lse is None else lse[hs]  # (the relu's weights need none)
                a_h = _weights(sub, q[:, hs], k[:, hs], b_h, ctx.scale, ctx.score, lse_h)[0]
            else:
                a_h = a[hs]
            k_h = None if keep is None else keep[hs]
            d_w = None if d_weights is None else d_weights[hs]
            # one head's output gradient, read by two kernels: copied once if its rows lie apart (as in
            # the packed (N, H, E) layout), not once per kernel
            d_out_h = d_out[:, hs] if blocks.fused or head_major(d_out[:, hs]) else d_out[:, hs].contiguous()
            d_s = _head_value_grads(ctx, sub, a_h, k_h, d_out_h, v[:, hs], d_w)
            if d_bias is not None:
                d_bias[hs] = d_s
            # (the scale is applied by the two products, not to the (h, V) scores' gradient)
            if "q" in targets:
                product("q", d_s, k[:, hs], False, hs, ctx.scale)
            if "k" in targets:
                product("k", d_s, q[:, hs], True, hs, ctx.scale)
            del d_s  # (before the values' gradient is made)
            if "v" in targets:
                weights = a_h if keep is None else a_h * keep[hs] / (1.0 - ctx.dropout_p)
                product("v", weights, d_out_h, True, hs)
                del weights
            del a_h  # (before the next head's are made)
        grads = [None if name not in targets or targets[name][1] else targets[name][0] for name in "qkv"]
        return (*grads, d_bias, None, None, None, None, None)


def _weights(
    blocks: Blocks, q: Tensor, k: Tensor, bias: Tensor | None, scale: float, score: str, lse: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """The attention weights (h, V) of the heads of ``q`` (B, h, L, E) over ``k``, and for the softmax each
    flat row's log-sum-exp of its scores (h, B * L). Given that log-sum-exp (a recomputation), the weights
    come from it directly, with no reduction; else the row maximum is subtracted before the exponential."""
    if score == "softmax" and lse is None:
        a, m, z = _exponentials(blocks, q, k, bias, scale)
        return a.div_(expand(blocks, z)), m.add_(z.log_())
    s = _scores(blocks, q, k, bias, scale)
    if score != "softmax":
        return F.relu(s).div_(expand(blocks, _row_counts(blocks, s.dtype))), None
    assert lse is not None  # (the softmax without it returned above)
    return s.sub_(expand(blocks, lse)).exp_(), lse


def _scores(blocks: Blocks, q: Tensor, k: Tensor, bias: Tensor | None, scale: float) -> Tensor:
    """The scores (h, V) of the pairs: scaled products, plus the bias."""
    s = sampled(blocks, q, k)
    s.mul_(scale)
    return s if bias is None else s.add_(bias)


def _exponentials(
    blocks: Blocks, q: Tensor, k: Tensor, bias: Tensor | None, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The softmax's numerators exp(s - m) (h, V), each flat row's maximum score m and the sum z of its
    numerators (h, B * L): the weights are the numerators over z, the log-sum-exp m + log z."""
    s = _scores(blocks, q, k, bias, scale)
    m = segment_max(blocks, s)  # (h, B * L)
    e = s.sub_(expand(blocks, m)).exp_()
    return e, m, segment_sum(blocks, e)


def _result(blocks: Blocks, operand: Tensor, rows: int, E: int) -> Tensor:  # noqa: N803
    """A new (B, H, rows, E) result, laid out in memory as :func:`spmm` would lay it for ``operand``."""
    B, H = blocks.batch, blocks.heads
    order = result_order(blocks, operand)
    shape = {"head": (B, H, rows, E), "token": (B, rows, H, E), "heads_first": (H, B, rows, E)}[order]
    return as_heads_second(operand.new_empty(shape), order)


def _head_value_grads(
    ctx: Any, blocks: Blocks, a: Tensor, keep: Tensor | None, d_out: Tensor, v: Tensor, d_weights: Tensor | None
) -> Tensor:
    r"""The gradient of the scores of some heads, (h, V), from their weights ``a`` (h, V) and the output's
    gradient: :math:`\partial s = a \odot (\partial a - \sum_{\mathrm{row}} a\,\partial a)` for the
    softmax, in place on a buffer of its own."""
    d_a = sampled(blocks, d_out, v)  # dL/d weights, (h, V)
    if d_weights is not None:
        d_a.add_(d_weights)
    if keep is not None:
        d_a.mul_(keep).div_(1.0 - ctx.dropout_p)
    if ctx.score == "softmax":
        row = segment_sum(blocks, a * d_a)
        return d_a.sub_(expand(blocks, row)).mul_(a)  # a (d_a - sum a d_a)
    return d_a.div_(expand(blocks, _row_counts(blocks, a.dtype))).masked_fill_(a <= 0, 0.0)


def _row_counts(blocks: Blocks, dtype: torch.dtype) -> Tensor:
    """|A(i)| of every flat row, at least 1, (1, B * L)."""
    return blocks.counts.clamp(min=1).to(dtype).view(1, -1)
