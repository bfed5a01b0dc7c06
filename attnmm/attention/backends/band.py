r"""The band backend: blocked attention for banded masks, O(L * w) time and at most O(L * w) memory."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnmm.attention._problem import Problem
from attnmm.attention.backends._blocks import BandGeometry
from attnmm.attention.backends._sizes import compute_bytes, output_bytes
from attnmm.attention.backends.base import Backend, Supports
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

    Blocks are processed in chunks of about 2M scores, so transient buffers stay small; the weights
    (B * H * L * W values, W about 1.25 w) are kept for the backward pass, which is written by hand
    on the same layout and sums window gradients back onto the keys. No (L, S) tensor is ever
    built. Half-precision inputs are computed in float32.

    Args:
        block (int, optional): queries per block T; ``None`` picks it from the band width.
            (default: :obj:`None`)

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Padding, Window
        >>> q = k = v = torch.randn(2, 4, 100, 16)  # (B, H, L, E)
        >>> mask = Window(8, 8) & Padding([100, 60])
        >>> out = attend(q, k, v, mask, backend="band")
        >>> torch.allclose(out, attend(q, k, v, mask, backend="reference"), atol=1e-5)
        True
    """

    name = "band"
    supports = Supports(structures=frozenset({"band"}), empty=False)
    preference = 20

    memory_hint = "use a narrower band (smaller left + right), a smaller batch, or fewer heads"

    def __init__(self, block: int | None = None) -> None:
        self.block = block

    def memory_bytes(self, problem: Problem) -> int:
        left, right = problem.structure.left, problem.structure.right
        if left is None or right is None:
            return 0
        geo = BandGeometry.build(problem.B, problem.H, problem.L, problem.S, left, right, self.block)
        slots = geo.B * geo.H * geo.nbp * geo.T * geo.W  # scores of every block's window
        padded = geo.B * geo.H * (geo.nbp + geo.c) * geo.T * max(problem.q.size(-1), problem.v.size(-1))
        # weights kept for backward, their gradient, returned weights; padded q, k, v and their gradients
        copies = 2 + problem.return_weights
        return (slots * copies + 6 * padded) * compute_bytes(problem.q.dtype) + output_bytes(problem)

    def cost_terms(self, problem: Problem) -> tuple[float, ...] | None:
        # multiply-adds over every block's window of W slots, the slots themselves, and the chunks the
        # blocks are processed in (a few kernel calls each)
        structure = problem.structure
        if structure.left is None or structure.right is None:
            return None
        left, right = structure.left, structure.right
        geo = BandGeometry.build(problem.B, problem.H, problem.L, problem.S, left, right, self.block)
        slots = geo.B * geo.H * geo.nbp * geo.T * geo.W
        chunks = len(geo.chunks())
        return float(slots * (problem.q.size(-1) + problem.v.size(-1))), float(slots), float(chunks)

    def check(self, problem: Problem) -> str | None:
        if not isinstance(problem.effective_mask, IntervalMask):
            return f"the mask {type(problem.effective_mask).__name__} has a band but no per-query interval"
        if problem.B == 0 or problem.H == 0:
            return f"the batch is empty (B = {problem.B}, H = {problem.H})"
        return None

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        mask = problem.effective_mask
        assert isinstance(mask, IntervalMask)
        q, k, v = problem.q, problem.k, problem.v
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        left, right = mask.structure.left, mask.structure.right
        assert left is not None and right is not None
        geo = BandGeometry.build(problem.B, problem.H, problem.L, problem.S, left, right, self.block)
        start, end = _ranges(mask, geo, problem.batch_size, q.device)  # (B or 1, nbp, T)
        bias = _band_bias(problem, geo, compute) if problem.bias is not None else None
        out, weights = _BandAttention.apply(
            q.to(compute),
            k.to(compute),
            v.to(compute),
            bias,
            start,
            end,
            geo,
            problem.scale,
            problem.score,
            problem.dropout_p,
            problem.return_weights,
        )
        out = out.to(v.dtype)
        if not problem.return_weights:
            return out, None
        wp = problem.weight_pairs()
        b = wp.batch if wp.batch is not None else torch.zeros_like(wp.row)
        n, t, w = geo.slot(wp.row, wp.col)
        weights = weights.view(geo.B, geo.H, geo.nbp, geo.T, geo.W)
        values = weights.permute(0, 2, 3, 4, 1)[b, n, t, w]  # (P, H)
        return out, values.to(q.dtype)


def _ranges(
    mask: IntervalMask, geo: BandGeometry, batch_size: int | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Allowed key range ``[start, end)`` of every query slot, each (B or 1, nbp, T); empty for the
    padding queries past L."""
    i, _ = geo.positions(device)
    i = i.squeeze(-1)  # (nbp, T)
    if batch_size is None:
        b = torch.zeros((), dtype=torch.long, device=device)
    else:
        b = torch.arange(batch_size, device=device).view(-1, 1, 1)
    start, end = mask.interval(b, i)
    shape = torch.broadcast_shapes(start.shape, end.shape, i.shape, b.shape)
    start = start.expand(shape).clamp(0, geo.S)
    end = torch.where(i < geo.L, end.expand(shape).clamp(0, geo.S), start)
    return start.reshape(-1, geo.nbp, geo.T), end.reshape(-1, geo.nbp, geo.T)


def _band_bias(problem: Problem, geo: BandGeometry, dtype: torch.dtype) -> Tensor:
    """Scatter the per-pair bias (P, H) into the band layout (B*H*nbp, T, W), zero elsewhere."""
    pairs = problem.pairs()
    assert problem.bias is not None
    nbat = pairs.batch_size or 1 if pairs.batch is not None else 1
    b = pairs.batch if pairs.batch is not None else torch.zeros_like(pairs.row)
    n, t, w = geo.slot(pairs.row, pairs.col)
    dense = problem.bias.new_zeros(nbat, geo.nbp, geo.T, geo.W, geo.H, dtype=dtype)
    dense = dense.index_put((b, n, t, w), problem.bias.to(dtype))
    dense = dense.permute(0, 4, 1, 2, 3).expand(geo.B, geo.H, geo.nbp, geo.T, geo.W)
    return dense.reshape(-1, geo.T, geo.W)  # (B*H*nbp, T, W)


class _Chunk:
    """The scores and weights of the global blocks ``g0:g1``."""

    def __init__(self, geo: BandGeometry, g0: int, g1: int, start: Tensor, end: Tensor) -> None:
        g = torch.arange(g0, g1, device=start.device)
        n = g % geo.nbp
        b = g // (geo.H * geo.nbp) if start.size(0) > 1 else torch.zeros_like(g)
        offset = (n * geo.T - geo.left).view(-1, 1)  # key index of each block's first window slot
        lo, hi = start[b, n] - offset, end[b, n] - offset  # allowed window slots [lo, hi), (G, T)
        if bool((lo == lo[:1]).all() and (hi == hi[:1]).all()):  # one pattern for every block
            lo, hi = lo[:1], hi[:1]
        slots = torch.arange(geo.W, device=g.device)
        self.blocked = (slots < lo.unsqueeze(-1)) | (slots >= hi.unsqueeze(-1))  # (G or 1, T, W)
        self.some_empty = bool((hi <= lo).any())
        self.g0, self.g1 = g0, g1

    def weights(
        self, qb: Tensor, kwin: Tensor, bias: Tensor | None, score: str, out: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """Attention weights before dropout, written into ``out`` (G, T, W), and for ReLU scores the
        row sizes (G or 1, T, 1)."""
        g0, g1, blocked = self.g0, self.g1, self.blocked
        if score == "relu":
            s = torch.bmm(qb[g0:g1], kwin[g0:g1].transpose(1, 2), out=out)  # (G, T, W); qb is pre-scaled
            if bias is not None:
                s = s.add_(bias[g0:g1])
            count = (~blocked).sum(-1, keepdim=True).clamp_min(1).to(s.dtype)
            return s.masked_fill_(blocked, 0.0).relu_().div_(count), count
        s = torch.bmm(qb[g0:g1], kwin[g0:g1].transpose(1, 2))
        if bias is not None:
            s = s.add_(bias[g0:g1])
        # the lowest finite value (not -inf) keeps empty rows finite; they are zeroed after
        s = s.masked_fill_(blocked, torch.finfo(s.dtype).min)
        a = torch.ops.aten._softmax.out(s, -1, False, out=out)
        return (a.masked_fill_(blocked, 0.0) if self.some_empty else a), None


class _BandAttention(torch.autograd.Function):
    """Blocked band attention, computed chunk by chunk; q (B, H, L, E), k (B, H, S, E),
    v (B, H, S, Ev), bias (B*H*nbp, T, W) or None, allowed ranges start/end (B or 1, nbp, T) ->
    out (B, H, L, Ev) and the weights after dropout (B*H*nbp, T, W) (empty unless asked for)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        start: Tensor,
        end: Tensor,
        geo: BandGeometry,
        scale: float,
        score: str,
        dropout_p: float,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor]:
        qb = geo.pad_queries(q, scale)  # (B*H*nbp, T, E), pre-scaled
        kf, vf = geo.pad_keys(k), geo.pad_keys(v)  # ((B*H*nbp + c) * T, E)
        kwin, vwin = geo.windows(kf), geo.windows(vf)  # (B*H*nbp, W, E) views
        out = qb.new_empty(qb.size(0), geo.T, v.size(-1))  # (B*H*nbp, T, Ev)
        nblk = qb.size(0)
        keep = torch.empty(nblk, geo.T, geo.W, dtype=torch.bool, device=q.device) if dropout_p > 0 else None
        saved = qb.new_empty(nblk, geo.T, geo.W)  # the weights before dropout, for backward
        count = qb.new_empty(nblk, geo.T, 1) if score == "relu" else None
        weights = qb.new_empty(nblk, geo.T, geo.W) if need_weights else qb.new_empty(0)
        for g0, g1 in geo.chunks():
            chunk = _Chunk(geo, g0, g1, start, end)
            a, n = chunk.weights(qb, kwin, bias, score, out=saved[g0:g1])
            if count is not None and n is not None:
                count[g0:g1] = n
            if keep is not None:
                keep[g0:g1] = torch.rand_like(a) >= dropout_p
                a = a * keep[g0:g1] / (1.0 - dropout_p)
            torch.bmm(a, vwin[g0:g1], out=out[g0:g1])
            if need_weights:
                weights[g0:g1] = a
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(qb, kf, vf, saved, count, keep)
        ctx.geo, ctx.scale, ctx.score, ctx.dropout_p = geo, scale, score, dropout_p
        ctx.device_type = q.device.type
        ctx.has_bias = bias is not None
        return geo.unpad_queries(out), weights  # a strided view: no copy

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        # a backward pass run inside torch.autocast would cast the products below to the autocast dtype
        # while their out= buffers keep the forward's: run it in the forward's dtypes
        with torch.autocast(ctx.device_type, enabled=False):
            return _BandAttention._backward(ctx, d_out, d_weights)

    @staticmethod
    def _backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        qb, kf, vf, saved, count, keep = ctx.saved_tensors
        geo: BandGeometry = ctx.geo
        p = ctx.dropout_p
        kwin, vwin = geo.windows(kf), geo.windows(vf)
        if d_out is None:
            d_out = vf.new_zeros(geo.B, geo.H, geo.L, vf.size(-1))
        dob = geo.pad_queries(d_out)  # (B*H*nbp, T, Ev)
        d_bias = torch.empty_like(saved) if ctx.has_bias and ctx.needs_input_grad[3] else None
        d_qb = torch.empty_like(qb)
        d_kf, d_vf = geo.new_key_grad(qb, qb.size(-1)), geo.new_key_grad(qb, vf.size(-1))
        for g0, g1 in geo.chunks():
            a = saved[g0:g1]
            d_a = torch.bmm(dob[g0:g1], vwin[g0:g1].transpose(1, 2))  # dL/d weights, (G, T, W)
            if d_weights is not None:
                d_a = d_a.add_(d_weights[g0:g1])
            w = a
            if keep is not None:
                w = a * keep[g0:g1] / (1.0 - p)
                d_a = d_a.mul_(keep[g0:g1]).div_(1.0 - p)
            if ctx.score == "softmax":
                d_s = torch.ops.aten._softmax_backward_data(d_a, a, -1, a.dtype)
            else:
                d_s = torch.where(a > 0, d_a / count[g0:g1], torch.zeros_like(d_a))
            if d_bias is not None:
                d_bias[g0:g1] = d_s
            torch.bmm(d_s, kwin[g0:g1], out=d_qb[g0:g1])
            geo.accumulate_keys(d_kf, g0, d_s, qb[g0:g1])
            geo.accumulate_keys(d_vf, g0, w, dob[g0:g1])
        d_q = geo.unpad_queries(d_qb.mul_(ctx.scale)) if ctx.needs_input_grad[0] else None
        d_k = geo.unpad_keys(d_kf) if ctx.needs_input_grad[1] else None
        d_v = geo.unpad_keys(d_vf) if ctx.needs_input_grad[2] else None
        return d_q, d_k, d_v, d_bias, None, None, None, None, None, None, None
