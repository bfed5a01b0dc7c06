r"""The sparse backend: segment softmax over the allowed pairs in CSR form, O(nnz) time and memory."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnmm.attention._problem import Problem
from attnmm.attention.backends import _cache
from attnmm.attention.backends._csr import (
    CSRPattern,
    Layout,
    expand,
    from_pairs,
    sampled,
    segment_max,
    segment_sum,
    spmm,
    to_pairs,
)
from attnmm.attention.backends._sizes import PAIR_BYTES, compute_bytes, max_pairs, output_bytes
from attnmm.attention.backends.base import Backend, Supports


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
    :math:`\partial V = A^\top \partial O`). Only (nnz, H) tensors are kept; keys and values are never
    copied per pair. Heads and batch items are handled as one block-diagonal matrix, over the operands
    in the order they lie in memory: inputs laid out as (B, L, H, E), such as packed (N, H, E) node
    features, are used as they are (the heads of each key are read together), others head by head.
    Half-precision inputs are computed in float32.

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
    preference = 60  # after the reference for dense masks (the reference ranks last for sparse ones)

    def memory_bytes(self, problem: Problem) -> int:
        """O(nnz * H): the allowed pairs repeated over the batch, their CSR pattern per head (three
        indices) and about eight per-pair values per head (scores, weights and their gradients); 0 when
        the mask cannot bound its pair count."""
        pairs = max_pairs(problem)
        if pairs is None:
            return 0
        if problem.batch_size is None:
            pairs *= problem.B  # the pattern repeats an unbatched mask's pairs for every batch item
        per_pair = PAIR_BYTES + 8 + problem.H * (16 + 8 * compute_bytes(problem.q.dtype))
        return pairs * per_pair + output_bytes(problem)

    def cost_terms(self, problem: Problem) -> tuple[float, ...]:
        """Multiply-adds per allowed pair and head, the pairs' per-head values, the query rows, and
        the pairs times the mean keys per query row.

        The last term models what a per-pair constant cannot: measured on CPU (one thread, H = 2,
        E = 64, forward + backward, ``Documents(n) & Causal()``), the time per pair grows with the
        keys per row: about 89 ns at n = 128, 145 ns at n = 512 and 460 ns at n = 2,048 (the
        calibration fits its constant with long-row problems).
        """
        pairs = problem.allowed_pairs * problem.H
        rows = problem.B * problem.H * problem.L
        per_row = pairs / rows if rows else 0.0
        return (
            float(pairs * (problem.q.size(-1) + problem.v.size(-1))),
            float(pairs),
            float(rows),
            float(pairs * per_row),
        )

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        q, k, v = problem.q, problem.k, problem.v
        B, H, L = problem.B, problem.H, problem.L
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        # flatten the operands in the order they already lie in memory: (B, L, H, E) is "token"
        # order (packed graphs, PyG's (N, H, E)), anything else goes head by head
        layout: Layout = "token" if H > 1 and q.transpose(1, 2).is_contiguous() else "head"
        pairs = _cache.pairs(problem)
        pattern = _cache.pattern(problem, layout)
        bias = None
        if problem.bias is not None:
            bias = problem.bias.to(compute)
            if pairs.batch is None and B > 1:
                bias = bias.repeat(B, 1)  # (B * P, H), shared over the batch
            bias = from_pairs(pattern, bias)  # (H * P,)
        q2, k2, v2 = (_rows(t.to(compute), layout) for t in (q, k, v))  # (H * B * L, E), ...
        out, weights = _SegmentAttention.apply(
            q2, k2, v2, bias, pattern, problem.scale, problem.score, problem.dropout_p
        )
        Ev = v.size(-1)
        if layout == "token":
            out = out.view(B, L, H, Ev).transpose(1, 2)  # (B, H, L, Ev)
        else:
            out = out.view(H, B, L, Ev).transpose(0, 1)  # (B, H, L, Ev)
        out = out.to(v.dtype)
        if not problem.return_weights:
            return out, None
        return out, to_pairs(pattern, weights).to(q.dtype)  # (P, H) at problem.weight_pairs()


def _rows(t: Tensor, layout: Layout) -> Tensor:
    """(B, H, n, E) -> the flat rows (H * B * n, E) of ``layout`` (a view when it matches memory)."""
    B, H, n, E = t.shape
    if layout == "token":
        return t.transpose(1, 2).reshape(B * n * H, E)
    return t.transpose(0, 1).reshape(H * B * n, E)


class _SegmentAttention(torch.autograd.Function):
    """Segment-softmax attention over a CSR pattern, on flat rows: q (H * R, E), k (H * C, E),
    v (H * C, Ev), bias (H * P,) or None -> out (H * R, Ev), weights after dropout (H * P,), values in
    the pattern's CSR order."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        pattern: CSRPattern,
        scale: float,
        score: str,
        dropout_p: float,
    ) -> tuple[Tensor, Tensor]:
        s = sampled(pattern, q, k)  # (H * P,)
        s.mul_(scale)
        if bias is not None:
            s.add_(bias)
        count = None
        if score == "softmax":
            m = segment_max(pattern, s)  # (H * R,)
            a = s.sub_(expand(pattern, m)).exp_()
            a.div_(expand(pattern, segment_sum(pattern, a)))  # (H * P,)
        else:
            count = pattern.counts.clamp(min=1).to(s.dtype)  # (H * R,)
            a = F.relu(s).div_(expand(pattern, count))
        keep = None
        weights = a
        if dropout_p > 0:
            keep = torch.rand_like(a) >= dropout_p
            weights = a * keep / (1.0 - dropout_p)
        out = spmm(pattern, weights, v)  # (H * R, Ev)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, a, keep, count)
        ctx.pattern, ctx.scale, ctx.score, ctx.dropout_p = pattern, scale, score, dropout_p
        ctx.has_bias = bias is not None
        return out, weights

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, a, keep, count = ctx.saved_tensors
        pattern: CSRPattern = ctx.pattern
        p = ctx.dropout_p
        weights = a if keep is None else a * keep / (1.0 - p)
        if d_out is None:
            d_out = v.new_zeros(pattern.heads * pattern.num_rows, v.size(-1))
        d_out = d_out.contiguous()  # (H * R, Ev)
        d_w = sampled(pattern, d_out, v)  # dL/d weights, (H * P,)
        if d_weights is not None:
            d_w = d_w + d_weights
        d_a = d_w if keep is None else d_w * keep / (1.0 - p)
        if ctx.score == "softmax":
            d_s = a * (d_a - expand(pattern, segment_sum(pattern, a * d_a)))  # (H * P,)
        else:
            d_s = torch.where(a > 0, d_a / expand(pattern, count), torch.zeros_like(d_a))
        d_q = d_k = d_v = None
        d_bias = d_s if ctx.has_bias and ctx.needs_input_grad[3] else None
        if ctx.needs_input_grad[2]:
            d_v = spmm(pattern, weights, d_out, transpose=True)
        del d_out, d_w, d_a, weights
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # the scale folded into the (H * P,) scores' gradient, not into the (H * R, E) results
            d_s = d_s * ctx.scale if d_bias is not None else d_s.mul_(ctx.scale)
        if ctx.needs_input_grad[0]:
            d_q = spmm(pattern, d_s, k)
        if ctx.needs_input_grad[1]:
            d_k = spmm(pattern, d_s, q, transpose=True)
        return d_q, d_k, d_v, d_bias, None, None, None, None
