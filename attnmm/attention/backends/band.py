r"""The band backend: blocked attention for banded masks, O(L * w) time and memory."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnmm.attention._problem import Problem
from attnmm.attention.backends._blocks import BandGeometry
from attnmm.attention.backends.base import Backend
from attnmm.masks.base import IntervalMask


class BandBackend(Backend):
    r"""Attention for banded interval masks (:class:`~attnmm.masks.Window`,
    :class:`~attnmm.masks.Chunk`, causal windows, and their intersections with
    :class:`~attnmm.masks.Padding`), in O(L * w) time and memory for a band of width w.

    Queries are taken in blocks of T; block :math:`n` scores only the window of keys its band can
    reach (see :mod:`~attnmm.attention.backends._blocks`), and within the window the exact allowed
    range :math:`[\mathrm{start}_b(i), \mathrm{end}_b(i))` of the mask's
    :meth:`~attnmm.masks.base.IntervalMask.interval` masks the scores:

    .. math::
        a_{ij} = \frac{\mathbb{1}[\mathrm{start}_b(i) \le j < \mathrm{end}_b(i)] \exp(s_{ij} - m_i)}
        {\sum_{j'} \mathbb{1}[\mathrm{start}_b(i) \le j' < \mathrm{end}_b(i)] \exp(s_{ij'} - m_i)}

    The backward pass is written by hand on the same blocked layout (window gradients are summed
    back onto the keys), so no (L, S) tensor is ever built. Half-precision inputs are computed in
    float32.
    """

    name = "band"

    def __init__(self, block: int | None = None) -> None:
        self.block = block

    def unsupported(self, problem: Problem) -> str | None:
        mask = problem.effective_mask
        kind = mask.structure.kind
        if kind != "band" or not isinstance(mask, IntervalMask):
            return f"the mask is {kind}, not banded"
        if problem.L == 0 or problem.S == 0:
            return f"there are no queries or keys (L = {problem.L}, S = {problem.S})"
        return None

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        mask = problem.effective_mask
        assert isinstance(mask, IntervalMask)
        q, k, v = problem.q, problem.k, problem.v
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        left, right = mask.structure.left, mask.structure.right
        assert left is not None and right is not None
        geo = BandGeometry.build(problem.B, problem.H, problem.L, problem.S, left, right, self.block)
        blocked = _blocked(mask, geo, problem.batch_size, q.device)  # (B or 1, 1, nbp, T, W)
        bias = _band_bias(problem, geo, compute) if problem.bias is not None else None
        out, weights = _BandAttention.apply(
            q.to(compute), k.to(compute), v.to(compute), bias, blocked, geo,
            problem.scale, problem.score, problem.dropout_p,
        )
        out = out.to(v.dtype)
        if not problem.return_weights:
            return out, None
        wp = problem.weight_pairs()
        b = wp.batch if wp.batch is not None else torch.zeros_like(wp.row)
        n, t, w = geo.slot(wp.row, wp.col)
        values = weights.permute(0, 2, 3, 4, 1)[b, n, t, w]  # (P, H)
        return out, values.to(q.dtype)


def _blocked(mask: IntervalMask, geo: BandGeometry, batch_size: int | None, device: torch.device) -> Tensor:
    """Which slots of the band layout are not allowed pairs, (B or 1, 1, nbp, T, W) bool."""
    i, j = geo.positions(device)
    if batch_size is None:
        b = torch.zeros((), dtype=torch.long, device=device)
    else:
        b = torch.arange(batch_size, device=device).view(-1, 1, 1, 1)
    start, end = mask.interval(b, i)
    start = start.clamp(0, geo.S)
    end = torch.where(i < geo.L, end.clamp(0, geo.S), start)  # padded queries see nothing
    blocked = (j < start) | (j >= end)
    return blocked.view(-1, 1, geo.nbp, geo.T, geo.W)


def _band_bias(problem: Problem, geo: BandGeometry, dtype: torch.dtype) -> Tensor:
    """Scatter the per-pair bias (P, H) into the band layout (B or 1, H, nbp, T, W), zero elsewhere."""
    pairs = problem.pairs()
    assert problem.bias is not None
    nbat = pairs.batch_size or 1 if pairs.batch is not None else 1
    b = pairs.batch if pairs.batch is not None else torch.zeros_like(pairs.row)
    n, t, w = geo.slot(pairs.row, pairs.col)
    dense = problem.bias.new_zeros(nbat, geo.nbp, geo.T, geo.W, geo.H, dtype=dtype)
    dense = dense.index_put((b, n, t, w), problem.bias.to(dtype))
    return dense.permute(0, 4, 1, 2, 3)  # (B or 1, H, nbp, T, W)


class _BandAttention(torch.autograd.Function):
    """Blocked band attention; q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev), bias in the band
    layout or None -> out (B, H, L, Ev), weights after dropout in the band layout (B, H, nbp, T, W)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        blocked: Tensor,
        geo: BandGeometry,
        scale: float,
        score: str,
        dropout_p: float,
    ) -> tuple[Tensor, Tensor]:
        B, H, nbp, T, W = geo.B, geo.H, geo.nbp, geo.T, geo.W
        qb = geo.pad_queries(q * scale)  # (B*H*nbp, T, E), pre-scaled
        kf, vf = geo.pad_keys(k), geo.pad_keys(v)  # ((B*H*nbp + c) * T, E)
        s = torch.bmm(qb, geo.windows(kf).transpose(1, 2)).view(B, H, nbp, T, W)
        if bias is not None:
            s = s.add_(bias)
        count = None
        if score == "softmax":
            # the lowest finite value (not -inf) keeps empty rows finite; they are zeroed after
            s = s.masked_fill_(blocked, torch.finfo(s.dtype).min)
            a = torch.softmax(s, dim=-1).masked_fill_(blocked, 0.0)
        else:
            count = (~blocked).sum(-1, keepdim=True).clamp_min(1).to(s.dtype)  # (B or 1, 1, nbp, T, 1)
            a = s.masked_fill_(blocked, 0.0).relu_().div_(count)
        del s
        keep = None
        weights = a
        if dropout_p > 0:
            keep = torch.rand_like(a) >= dropout_p
            weights = a * keep / (1.0 - dropout_p)
        out = torch.bmm(weights.view(-1, T, W), geo.windows(vf))  # (B*H*nbp, T, Ev)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(qb, kf, vf, a, keep, count)
        ctx.geo, ctx.scale, ctx.score, ctx.dropout_p = geo, scale, score, dropout_p
        ctx.bias_batch = None if bias is None else bias.size(0)
        return geo.unpad_queries(out).contiguous(), weights

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        qb, kf, vf, a, keep, count = ctx.saved_tensors
        geo: BandGeometry = ctx.geo
        p, T, W = ctx.dropout_p, geo.T, geo.W
        weights = a if keep is None else a * keep / (1.0 - p)
        if d_out is None:
            d_out = vf.new_zeros(geo.B, geo.H, geo.L, vf.size(-1))
        dob = geo.pad_queries(d_out)  # (B*H*nbp, T, Ev)
        d_a = torch.bmm(dob, geo.windows(vf).transpose(1, 2)).view_as(a)  # dL/d weights
        if d_weights is not None:
            d_a = d_a + d_weights
        if keep is not None:
            d_a = d_a * keep / (1.0 - p)
        if ctx.score == "softmax":
            d_s = torch.ops.aten._softmax_backward_data(d_a, a, -1, a.dtype)
        else:
            d_s = torch.where(a > 0, d_a / count, torch.zeros_like(d_a))
        d_bias = None
        if ctx.bias_batch is not None and ctx.needs_input_grad[3]:
            d_bias = d_s.sum(0, keepdim=True) if ctx.bias_batch == 1 and geo.B > 1 else d_s
        d_s = d_s.view(-1, T, W)  # (B*H*nbp, T, W)
        d_q = d_k = d_v = None
        if ctx.needs_input_grad[0]:
            d_q = geo.unpad_queries(torch.bmm(d_s, geo.windows(kf)).mul_(ctx.scale))
        if ctx.needs_input_grad[1]:
            d_k = geo.fold_products(d_s, qb)
        if ctx.needs_input_grad[2]:
            d_v = geo.fold_products(weights.view(-1, T, W), dob)
        return d_q, d_k, d_v, d_bias, None, None, None, None, None
