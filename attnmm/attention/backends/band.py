r"""The band backend: blocked attention for banded masks, O(L * w) time and at most O(L * w) memory."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnmm.attention.backends._blocks import BandGeometry
from attnmm.attention.backends._sizes import compute_bytes, output_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks._pairs import broadcast_shape
from attnmm.masks.base import Interval


class BandBackend(Backend):
    r"""Attention for banded interval masks (:class:`~attnmm.masks.Window`,
    :class:`~attnmm.masks.Chunk`, causal windows, and their intersections with
    :class:`~attnmm.masks.Padding`), in O(L * w) time and memory for a band of width w.

    Queries are taken in blocks of T; block :math:`n` scores only the window of keys its band can
    reach (see :mod:`~attnmm.attention.backends._blocks`), and within the window the exact allowed
    range :math:`[\mathrm{start}_b(i), \mathrm{end}_b(i))` of the mask's
    :attr:`Structure.interval <attnmm.masks.Structure>` masks the scores:

    .. math::
        a_{ij} = \frac{\mathbb{1}[\mathrm{start}_b(i) \le j < \mathrm{end}_b(i)] \exp(s_{ij} - m_i)}
        {\sum_{j'} \mathbb{1}[\mathrm{start}_b(i) \le j' < \mathrm{end}_b(i)] \exp(s_{ij'} - m_i)}

    Most blocks share one pattern of allowed slots, which enters the score product itself as an
    additive (T, W) bias; the blocks at a sequence's ends or past a padded length are recomputed
    with their own. Blocks are processed in chunks of about 2M scores, so transient buffers stay
    small; in training the weights (B * H * L * W values, W about 1.25 w) are kept for the backward
    pass, which is written by hand on the same layout and sums window gradients back onto the keys.
    Queries, keys and values are copied once into a padded layout, except in training on long
    sequences (256 query blocks or more, L a multiple of T, no bias, dropout or returned weights),
    where each sequence's query blocks and key windows are read where they lie (a small padded copy
    for the blocks at its ends) and the output and the gradients are written laid out as the inputs,
    so autograd copies none of them. Without a gradient nothing is
    kept: the forward runs in pieces (whole short sequences, or spans
    of a long one's query rows with the keys their band reaches), so its memory beyond the output
    is a few pieces of 1 MB whatever L. No (L, S) tensor is ever built. Half-precision inputs are
    computed in float32.

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

    def geometry(self, problem: Problem) -> BandGeometry | None:
        """The blocked layout of ``problem`` (``None`` when its mask has no band)."""
        left, right = problem.structure.left, problem.structure.right
        if left is None or right is None:
            return None
        return BandGeometry.build(problem.B, problem.H, problem.L, problem.S, left, right, self.block)

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        geo = self.geometry(problem)
        if geo is None:
            return 0
        if not problem.training and not problem.return_weights and not problem.has_bias:
            return _piece_bytes(problem, geo) + output_bytes(problem)
        slots = geo.B * geo.H * geo.nbp * geo.T * geo.W  # scores of every block's window
        padded = geo.B * geo.H * (geo.nbp + geo.c) * geo.T * max(problem.E, problem.Ev)
        # weights kept for backward, their gradient, returned weights; padded q, k, v and their gradients
        copies = 2 + problem.return_weights
        return (slots * copies + 6 * padded) * compute_bytes(problem.dtype) + output_bytes(problem)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...] | None:
        # multiply-adds over every block's window of W slots, the slots themselves, and the chunks the
        # blocks are processed in (a few kernel calls each)
        geo = self.geometry(problem)
        if geo is None:
            return None
        slots = geo.B * geo.H * geo.nbp * geo.T * geo.W
        chunks = len(geo.chunks())
        return float(slots * (problem.E + problem.Ev)), float(slots), float(chunks)

    def check(self, problem: Problem, forms: Forms) -> str | None:
        if problem.structure.interval is None:
            return f"the mask {problem.effective_mask!r} has a band but no per-query interval"
        if problem.B == 0 or problem.H == 0:
            return f"the batch is empty (B = {problem.B}, H = {problem.H})"
        return None

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        interval = problem.structure.interval
        q, k, v = inputs.q, inputs.k, inputs.v
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        geo = self.geometry(problem)
        assert interval is not None and geo is not None
        if not problem.training and not problem.return_weights and not problem.has_bias:
            out = _infer(q.to(compute), k.to(compute), v.to(compute), interval, geo, problem)
            return out.to(v.dtype), None
        batch = None if problem.batch_size is None else torch.arange(problem.batch_size, device=q.device)
        start, end = _ranges(interval, geo, batch, q.device)  # (B or 1, nbp, T)
        bias = _band_bias(forms, inputs, geo, compute) if problem.has_bias else None
        out, weights = _BandAttention.apply(q.to(compute), k.to(compute), v.to(compute), bias, start, end, geo,
                                            problem.scale, problem.score, problem.dropout_p, problem.return_weights)
        out = out.to(v.dtype)
        if not problem.return_weights:
            return out, None
        wp = forms.weight_pairs(problem.B)
        b = wp.batch if wp.batch is not None else torch.zeros_like(wp.row)
        n, t, w = geo.slot(wp.row, wp.col)
        weights = weights.view(geo.B, geo.H, geo.nbp, geo.T, geo.W)
        values = weights.permute(0, 2, 3, 4, 1)[b, n, t, w]  # (P, H)
        return out, values.to(q.dtype)


def _ranges(
    interval: Interval, geo: BandGeometry, batch: Tensor | None, device: torch.device, row0: int = 0, key0: int = 0
) -> tuple[Tensor, Tensor]:
    """Allowed key range ``[start, end)`` of every query slot, each (B or 1, nbp, T); empty for the
    padding queries past L. ``batch`` holds the batch item of each of the B sequences (None: the mask
    is the same for all); the layout's queries and keys start at rows ``row0`` and ``key0`` of the
    mask (a piece of the sequence, see :func:`_infer`)."""
    i = torch.arange(geo.nbp * geo.T, device=device).view(geo.nbp, geo.T)  # the query of every slot
    b = torch.zeros((), dtype=torch.long, device=device) if batch is None else batch.view(-1, 1, 1)
    start, end = interval(b, i + row0)
    shape = broadcast_shape(start.shape, end.shape, i.shape, b.shape)
    start = (start.expand(shape) - key0).clamp(0, geo.S)
    end = torch.where(i < geo.L, (end.expand(shape) - key0).clamp(0, geo.S), start)
    return start.reshape(-1, geo.nbp, geo.T), end.reshape(-1, geo.nbp, geo.T)


#: Elements of each piece of an inference pass: queries, keys and scores are copied piece by piece.
_PIECE = 1 << 18


def _piece_layout(L: int, E: int, Ev: int, T: int) -> tuple[int, int]:  # noqa: N803
    """Query rows and sequences per piece of :func:`_infer`."""
    width = max(E, Ev, 1)
    rows = max(T, _PIECE // width // T * T)  # query rows per piece, a multiple of the block
    seqs = max(1, _PIECE // (width * max(L, 1)))  # sequences per piece
    return rows, seqs


def _piece_bytes(problem: Problem, full: BandGeometry) -> int:
    """Working memory of :func:`_infer`: one piece's padded queries, keys, values and output, and
    its scores."""
    E, Ev = problem.E, problem.Ev
    rows, seqs = _piece_layout(problem.L, E, Ev, full.T)
    rows, seqs = min(rows, problem.L), min(seqs, problem.B * problem.H)
    padded_rows = rows + (full.c + 1) * full.T
    keys = min(problem.S, rows + full.left + full.right) + (full.c + 2) * full.T
    blocks = seqs * (-(-rows // full.T) + full.c)  # the blocks of a piece
    chunk = min(max(2 * _PIECE, full.T * full.W), blocks * full.T * full.W)  # at least one block, at most all
    elements = seqs * (padded_rows * (E + Ev) + keys * (E + Ev)) + chunk
    return elements * compute_bytes(problem.dtype)


def _infer(q: Tensor, k: Tensor, v: Tensor, interval: Interval, full: BandGeometry, problem: Problem) -> Tensor:
    r"""The forward pass alone, when no gradient is needed, in pieces of about :data:`_PIECE` values (see
    :class:`BandBackend`: whole short sequences, or spans of a long one's query rows)."""
    B, H, L, E = q.shape
    S, Ev, T = k.size(2), v.size(-1), full.T
    rows, seqs = _piece_layout(L, E, Ev, T)
    whole = seqs >= B * H and rows >= L  # one piece: the output is its layout's view, as in training
    out = q.new_empty(B, H, L if not whole else 0, Ev)
    qf, kf, vf, of = q.reshape(B * H, L, E), k.reshape(B * H, S, E), v.reshape(B * H, S, Ev), out.flatten(0, 1)
    for s0 in range(0, B * H, seqs):
        s1 = min(s0 + seqs, B * H)
        batch = None
        if problem.batch_size is not None:
            batch = torch.div(torch.arange(s0, s1, device=q.device), H, rounding_mode="floor")
        for r0 in range(0, L, rows):
            r1 = min(r0 + rows, L)
            k0, k1 = max(r0 - full.left, 0), min(r1 + full.right, S)  # the keys these rows' band reaches
            if k1 <= k0:  # none: the rows attend nothing
                if not whole:
                    of[s0:s1, r0:r1] = 0
                continue
            shift = r0 - k0
            geo = BandGeometry.build(s1 - s0, 1, r1 - r0, k1 - k0, full.left - shift, full.right + shift, T)
            start, end = _ranges(interval, geo, batch, q.device, r0, k0)
            qb = geo.pad_queries(qf[s0:s1, r0:r1].unsqueeze(1), problem.scale)
            kwin = geo.windows(geo.pad_keys(kf[s0:s1, k0:k1].unsqueeze(1)))
            vwin = geo.windows(geo.pad_keys(vf[s0:s1, k0:k1].unsqueeze(1)))
            o = qb.new_empty(qb.size(0), geo.T, Ev)
            chunks = geo.chunks() if whole else geo.chunks(2 * _PIECE)
            scratch = qb.new_empty(max(g1 - g0 for g0, g1 in chunks), geo.T, geo.W)
            pattern = _Pattern(geo, start, end, qb.dtype)
            for g0, g1 in chunks:
                a, _ = pattern.weights(g0, g1, qb[g0:g1], kwin[g0:g1], None, problem.score, out=scratch[: g1 - g0])
                if problem.dropout_p > 0:
                    a = torch.nn.functional.dropout(a, problem.dropout_p)
                torch.bmm(a, vwin[g0:g1], out=o[g0:g1])
            if whole:
                return geo.unpad_queries(o).view(B, H, L, Ev)
            of[s0:s1, r0:r1] = geo.unpad_queries(o).squeeze(1)
    return out if not whole else q.new_zeros(B, H, L, Ev)  # one piece and no key in reach


def _band_bias(forms: Forms, inputs: Inputs, geo: BandGeometry, dtype: torch.dtype) -> Tensor:
    """Scatter the per-pair bias (P, H) into the band layout (B*H*nbp, T, W), zero elsewhere."""
    pairs = forms.pairs()
    assert inputs.bias is not None
    nbat = pairs.batch_size or 1 if pairs.batch is not None else 1
    b = pairs.batch if pairs.batch is not None else torch.zeros_like(pairs.row)
    n, t, w = geo.slot(pairs.row, pairs.col)
    dense = inputs.bias.new_zeros(nbat, geo.nbp, geo.T, geo.W, geo.H, dtype=dtype)
    dense = dense.index_put((b, n, t, w), inputs.bias.to(dtype))
    dense = dense.permute(0, 4, 1, 2, 3).expand(geo.B, geo.H, geo.nbp, geo.T, geo.W)
    return dense.reshape(-1, geo.T, geo.W)  # (B*H*nbp, T, W)


class _Pattern:
    """The allowed window slots of every block of a band layout, and the attention weights of a range of
    its blocks: the pattern most blocks share (see :class:`BandBackend`) is a (1, T, W) bias of 0 and a large
    negative number; when most blocks differ, every block gets its own (G, T, W) bias."""

    def __init__(self, geo: BandGeometry, start: Tensor, end: Tensor, dtype: torch.dtype) -> None:
        g = torch.arange(geo.B * geo.H * geo.nbp, device=start.device)
        n = g % geo.nbp
        b = g // (geo.H * geo.nbp) if start.size(0) > 1 else torch.zeros_like(g)
        offset = (n * geo.T - geo.left).view(-1, 1)  # key index of each block's first window slot
        self.lo, self.hi = start[b, n] - offset, end[b, n] - offset  # allowed window slots [lo, hi), (G, T)
        self.slots = torch.arange(geo.W, device=g.device)
        self.negative = torch.finfo(dtype).min / 4  # finite: a blocked score stays far below every allowed one
        self.dtype = dtype
        filled = (self.hi > self.lo).any(-1).nonzero().squeeze(1)  # blocks with at least one allowed pair
        ref = int(filled[filled.numel() // 2]) if filled.numel() else 0
        same = (self.lo == self.lo[ref]).all(-1) & (self.hi == self.hi[ref]).all(-1)
        shared = 2 * int(same.sum()) >= same.numel()
        self.bias = self._bias(self.lo[ref : ref + 1], self.hi[ref : ref + 1]) if shared else None
        self.differ = (~same).nonzero().squeeze(1).tolist() if shared else []
        empty = self.hi <= self.lo  # (G, T) queries with no allowed key
        self.empty = empty.unsqueeze(-1)
        self.with_empty = empty.any(-1).nonzero().squeeze(1).tolist()  # blocks holding such a query

    def _blocked(self, lo: Tensor, hi: Tensor) -> Tensor:
        """The blocked slots (G, T, W) of blocks whose allowed slots are [lo, hi) (G, T)."""
        return (self.slots < lo.unsqueeze(-1)) | (self.slots >= hi.unsqueeze(-1))

    def _bias(self, lo: Tensor, hi: Tensor) -> Tensor:
        blocked = self._blocked(lo, hi)
        return torch.zeros(blocked.shape, dtype=self.dtype, device=lo.device).masked_fill_(blocked, self.negative)

    def weights(
        self, g0: int, g1: int, qs: Tensor, ks: Tensor, bias: Tensor | None, score: str, out: Tensor,
        scale: float = 1.0,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention weights of the blocks g0:g1 before dropout, written into ``out`` (G, T, W), and for
        ReLU scores the row sizes (G, T, 1): from those blocks' queries ``qs`` (G, T, E) times ``scale``,
        their key windows ``ks`` (G, W, E) and bias (G, T, W) or None."""
        if score == "relu":
            blocked = self._blocked(self.lo[g0:g1], self.hi[g0:g1])
            s = torch.baddbmm(out, qs, ks.transpose(1, 2), beta=0.0, alpha=scale, out=out)  # (G, T, W)
            if bias is not None:
                s = s.add_(bias)
            count = (~blocked).sum(-1, keepdim=True).clamp_min(1).to(s.dtype)
            return s.masked_fill_(blocked, 0.0).relu_().div_(count), count
        d0, d1 = bisect.bisect_left(self.differ, g0), bisect.bisect_left(self.differ, g1)
        few = 8 * (d1 - d0) <= g1 - g0  # few blocks differ: recompute them, else a bias per block
        if self.bias is not None and few:
            pattern = self.bias
        else:
            pattern = self._bias(self.lo[g0:g1], self.hi[g0:g1])
        if bias is None:
            s = torch.baddbmm(pattern, qs, ks.transpose(1, 2), alpha=scale, out=out)
        else:
            s = torch.baddbmm(bias, qs, ks.transpose(1, 2), alpha=scale, out=out).add_(pattern)
        if self.bias is not None and few and d1 > d0:  # recomputed with their own pattern
            d = torch.tensor(self.differ[d0:d1], device=qs.device)
            own = self._bias(self.lo[d], self.hi[d])
            part = torch.baddbmm(own, qs[d - g0], ks[d - g0].transpose(1, 2), alpha=scale)
            s[d - g0] = part if bias is None else part.add_(bias[d - g0])
        a = torch.ops.aten._softmax.out(s, -1, False, out=out)
        # a query with no allowed key has spread its weight evenly over blocked slots: zero its row
        e0, e1 = bisect.bisect_left(self.with_empty, g0), bisect.bisect_left(self.with_empty, g1)
        if 4 * (e1 - e0) > g1 - g0:
            a.masked_fill_(self.empty[g0:g1], 0.0)
        elif e1 > e0:
            d = torch.tensor(self.with_empty[e0:e1], device=a.device)
            a[d - g0] = a[d - g0].masked_fill_(self.empty[d], 0.0)
        return a, None


#: Query blocks per sequence from which training runs sequence by sequence on the inputs as they lie in
#: memory (no padded copy of the queries, keys, values or the output's gradient; the output and the
#: gradients made in the inputs' layouts). Shorter sequences run as one padded batch of blocks: a loop
#: over many of them costs a few kernel calls per sequence, while their copies are small. Measured
#: (Window ±64, T = 32, H = 4, E = 64, 2 threads): at 256 blocks (L = 8192) the two paths take the same
#: time; at 2,048 (L = 65536) sequence by sequence takes 0.79-0.89 of the padded path's.
SEQUENCE_BLOCKS = 256


def _by_sequence(
    geo: BandGeometry, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, need_weights: bool, dropout_p: float
) -> bool:
    """Whether training runs sequence by sequence (:data:`SEQUENCE_BLOCKS`): long sequences that the query
    blocks cover exactly, rows of q, k and v contiguous, no bias and no returned weights (both kept per
    padded block), no dropout (whose draws the returned weights show, and only they)."""
    if bias is not None or need_weights or dropout_p > 0:
        return False
    rows = all(t.stride(-1) == 1 for t in (q, k, v))
    return geo.L % geo.T == 0 and geo.nb >= SEQUENCE_BLOCKS and rows


def _like_layout(t: Tensor, last: int) -> Tensor:
    """A new (B, H, n, last) tensor laid out as ``t`` (B, H, n, E) is: token-major or head-major."""
    B, H, n, _ = t.shape
    if not t.is_contiguous() and t.transpose(1, 2).is_contiguous():
        return t.new_empty(B, n, H, last).transpose(1, 2)
    return t.new_empty(B, H, n, last)


class _SequenceKeys:
    """The keys (or values) of one sequence, (S, E) with contiguous rows, read where they lie: the window
    of query block n is keys [nT - left, nT - left + W). Blocks whose window lies inside the sequence
    (the interior) read a strided view of it; those at its ends, whose windows reach past it, read a
    zero-padded copy of the few keys theirs span. ``grad`` (S, E), when given, receives the adjoint
    (:meth:`accumulate`)."""

    def __init__(self, geo: BandGeometry, keys: Tensor, grad: Tensor | None = None) -> None:
        self.geo, self.keys, self.grad = geo, keys, grad
        T, W, left, S = geo.T, geo.W, geo.left, keys.size(0)
        self.first = min(geo.nb, -(-left // T))  # the first block whose window starts at a key >= 0
        last = (S + left - W) // T + 1 if S + left >= W else 0  # past the last whose window ends <= S
        self.end = max(self.first, min(geo.nb, last))

    def pieces(self, step: int) -> Iterator[tuple[int, int]]:
        """Block ranges computed together, at most ``step`` blocks each, none crossing from the ends
        into the interior."""
        for lo, hi in ((0, self.first), (self.first, self.end), (self.end, self.geo.nb)):
            for n0 in range(lo, hi, step):
                yield n0, min(n0 + step, hi)

    def _span(self, n0: int, n1: int) -> tuple[int, int]:
        """The key rows the windows of blocks n0..n1-1 cover: (n1 - n0 + c) T of them from n0 T - left."""
        lo = n0 * self.geo.T - self.geo.left
        return lo, lo + (n1 - n0 + self.geo.c) * self.geo.T

    def _strided(self, t: Tensor, row: int, blocks: int, width: int) -> Tensor:
        """(blocks, width, E) runs of rows of ``t`` (n, E), the first at ``row``, each T rows after the
        one before (a view)."""
        step = t.stride(0)
        return t.as_strided((blocks, width, t.size(1)), (self.geo.T * step, step, 1), t.storage_offset() + row * step)

    def windows(self, n0: int, n1: int) -> Tensor:
        """The windows (n1 - n0, W, E) of blocks n0..n1-1: a view in the interior, else a padded copy."""
        geo, keys = self.geo, self.keys
        lo, hi = self._span(n0, n1)
        if self.first <= n0 and n1 <= self.end:  # the interior
            base, row = keys, lo
        else:
            base, row = keys.new_zeros(hi - lo, keys.size(1)), 0
            a, b = max(lo, 0), min(hi, keys.size(0))
            if b > a:
                base[a - lo : b - lo] = keys[a:b]
        return self._strided(base, row, n1 - n0, geo.W)

    def accumulate(self, n0: int, n1: int, x: Tensor, y: Tensor, alpha: float = 1.0) -> None:
        """Add alpha X^T Y of blocks n0..n1-1 (x (G, T, W) per window slot, y (G, T, E)) onto the keys
        their windows cover, in ``grad``: the adjoint of :meth:`windows`."""
        geo, grad = self.geo, self.grad
        assert grad is not None
        T, G = geo.T, n1 - n0
        lo, hi = self._span(n0, n1)
        inside = self.first <= n0 and n1 <= self.end
        base, row = (grad, lo) if inside else (grad.new_zeros(hi - lo, grad.size(1)), 0)
        # the rows the windows cover as G + c blocks of T keys, the padded layout's shape (a view)
        geo.accumulate_keys(self._strided(base, row, G + geo.c, T), 0, x, y, alpha=alpha)
        if not inside:
            a, b = max(lo, 0), min(hi, grad.size(0))
            if b > a:
                grad[a:b] += base[a - lo : b - lo]


class _BandAttention(torch.autograd.Function):
    """Blocked band attention, computed chunk by chunk (on the padded layout, or sequence by sequence on the
    inputs where they lie: :func:`_by_sequence`, :class:`_SequenceKeys`); q (B, H, L, E), k (B, H, S, E),
    v (B, H, S, Ev), bias (B*H*nbp, T, W) or None, allowed ranges start/end (B or 1, nbp, T) ->
    out (B, H, L, Ev) and the weights after dropout (B*H*nbp, T, W) (empty unless asked for)."""

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, start: Tensor, end: Tensor, geo: BandGeometry,
        scale: float, score: str, dropout_p: float, need_weights: bool,
    ) -> tuple[Tensor, Tensor]:
        by_sequence = _by_sequence(geo, q, k, v, bias, need_weights, dropout_p)
        pattern = _Pattern(geo, start, end, q.dtype)
        nblk = geo.B * geo.H * (geo.nb if by_sequence else geo.nbp)  # by sequence: the real blocks only
        keep = torch.empty(nblk, geo.T, geo.W, dtype=torch.bool, device=q.device) if dropout_p > 0 else None
        saved = q.new_empty(nblk, geo.T, geo.W)  # the weights before dropout, for backward
        count = q.new_empty(nblk, geo.T, 1) if score == "relu" else None
        weights = q.new_empty(nblk, geo.T, geo.W) if need_weights else q.new_empty(0)

        def chunk(g0: int, g1: int, r0: int, qs: Tensor, ks: Tensor, vs: Tensor, outs: Tensor, alpha: float) -> None:
            r1 = r0 + g1 - g0
            a, n = pattern.weights(g0, g1, qs, ks, None if bias is None else bias[g0:g1], score, out=saved[r0:r1],
                                   scale=alpha)
            if count is not None and n is not None:
                count[r0:r1] = n
            if keep is not None:
                keep[r0:r1] = torch.rand_like(a) >= dropout_p
                a = a * keep[r0:r1] / (1.0 - dropout_p)
            torch.bmm(a, vs, out=outs)
            if need_weights:
                weights[r0:r1] = a

        if by_sequence:
            out = _like_layout(q, v.size(-1))  # (B, H, L, Ev), laid out as q
            for b, h, g0, r0, n0, n1, keys, values in _sequences(geo, k, v):
                qs, outs = q[b, h].unflatten(0, (-1, geo.T)), out[b, h].unflatten(0, (-1, geo.T))  # (nb, T, E)
                chunk(g0 + n0, g0 + n1, r0 + n0, qs[n0:n1], keys.windows(n0, n1), values.windows(n0, n1),
                      outs[n0:n1], scale)
            ctx.save_for_backward(q, k, v, saved, count, keep)
        else:
            qb = geo.pad_queries(q, scale)  # (B*H*nbp, T, E), pre-scaled
            kf, vf = geo.pad_keys(k), geo.pad_keys(v)  # ((B*H*nbp + c) * T, E)
            kwin, vwin = geo.windows(kf), geo.windows(vf)  # (B*H*nbp, W, E) views
            padded = qb.new_empty(qb.size(0), geo.T, v.size(-1))  # (B*H*nbp, T, Ev)
            for g0, g1 in geo.chunks():
                chunk(g0, g1, g0, qb[g0:g1], kwin[g0:g1], vwin[g0:g1], padded[g0:g1], 1.0)
            out = geo.unpad_queries(padded)  # a strided view: no copy
            ctx.save_for_backward(qb, kf, vf, saved, count, keep)
        ctx.set_materialize_grads(False)
        ctx.geo, ctx.scale, ctx.score, ctx.dropout_p = geo, scale, score, dropout_p
        ctx.device_type, ctx.by_sequence = q.device.type, by_sequence
        ctx.has_bias = bias is not None
        return out, weights

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor | None, d_weights: Tensor | None) -> tuple[Tensor | None, ...]:
        # a backward pass run inside torch.autocast would cast the products below to the autocast dtype
        # while their out= buffers keep the forward's: run it in the forward's dtypes
        with torch.autocast(ctx.device_type, enabled=False):
            qb, kf, vf, saved, count, keep = ctx.saved_tensors  # (by sequence: q, k and v themselves)
            geo: BandGeometry = ctx.geo
            p = ctx.dropout_p
            if d_out is None:
                d_out = vf.new_zeros(geo.B, geo.H, geo.L, vf.size(-1))
            d_bias = torch.empty_like(saved) if ctx.has_bias and ctx.needs_input_grad[3] else None

            def chunk(
                r0: int, r1: int, dos: Tensor, ks: Tensor, vs: Tensor, d_qs: Tensor, alpha: float
            ) -> tuple[Tensor, Tensor]:
                """One chunk of blocks: its queries' gradient written into ``d_qs`` (times ``alpha``); returns
                the weights after dropout (for the values' gradient) and the scores' gradient (for the keys')."""
                a = saved[r0:r1]
                d_a = torch.bmm(dos, vs.transpose(1, 2))  # dL/d weights, (G, T, W)
                if d_weights is not None:
                    d_a = d_a.add_(d_weights[r0:r1])
                w = a
                if keep is not None:
                    w = a * keep[r0:r1] / (1.0 - p)
                    d_a = d_a.mul_(keep[r0:r1]).div_(1.0 - p)
                if ctx.score == "softmax":
                    d_s = torch.ops.aten._softmax_backward_data(d_a, a, -1, a.dtype)
                else:
                    d_s = torch.where(a > 0, d_a / count[r0:r1], torch.zeros_like(d_a))
                if d_bias is not None:
                    d_bias[r0:r1] = d_s
                torch.baddbmm(d_qs, d_s, ks, beta=0.0, alpha=alpha, out=d_qs)
                return w, d_s

            if ctx.by_sequence:
                q, k, v = qb, kf, vf
                dob = d_out if d_out.stride(-1) == 1 else d_out.contiguous()
                d_q = _like_layout(q, q.size(-1))
                d_k, d_v = _like_layout(k, k.size(-1)).zero_(), _like_layout(v, v.size(-1)).zero_()
                for b, h, _, r0, n0, n1, keys, values in _sequences(geo, k, v, d_k, d_v):
                    qs, dos, d_qs = (t[b, h].unflatten(0, (-1, geo.T))[n0:n1] for t in (q, dob, d_q))  # (G, T, E)
                    w, d_s = chunk(r0 + n0, r0 + n1, dos, keys.windows(n0, n1), values.windows(n0, n1), d_qs, ctx.scale)
                    keys.accumulate(n0, n1, d_s, qs, alpha=ctx.scale)  # (q is not pre-scaled)
                    values.accumulate(n0, n1, w, dos)
                grads = (d_q, d_k, d_v)
            else:
                kwin, vwin = geo.windows(kf), geo.windows(vf)
                dob = geo.pad_queries(d_out)  # (B*H*nbp, T, Ev)
                d_qb = torch.empty_like(qb)
                d_kf, d_vf = geo.new_key_grad(qb, qb.size(-1)), geo.new_key_grad(qb, vf.size(-1))
                for g0, g1 in geo.chunks():
                    w, d_s = chunk(g0, g1, dob[g0:g1], kwin[g0:g1], vwin[g0:g1], d_qb[g0:g1], 1.0)
                    geo.accumulate_keys(d_kf, g0, d_s, qb[g0:g1])
                    geo.accumulate_keys(d_vf, g0, w, dob[g0:g1])
                grads = (geo.unpad_queries(d_qb.mul_(ctx.scale)), geo.unpad_keys(d_kf), geo.unpad_keys(d_vf))
            wanted = [g if need else None for g, need in zip(grads, ctx.needs_input_grad[:3])]
            return (*wanted, d_bias, None, None, None, None, None, None, None)


def _sequences(
    geo: BandGeometry, k: Tensor, v: Tensor, d_k: Tensor | None = None, d_v: Tensor | None = None
) -> Iterator[tuple[int, int, int, int, int, int, _SequenceKeys, _SequenceKeys]]:
    """Every sequence (b, h) of a problem run sequence by sequence, in chunks of its query blocks: b, h,
    the sequence's first padded block (the mask pattern's index) and first real block (the kept
    weights' index), the chunk's blocks n0..n1-1, and the sequence's keys and values (with their
    gradients, when given)."""
    step = max(1, geo.chunks()[0][1])  # blocks per chunk
    for b in range(geo.B):
        for h in range(geo.H):
            seq = b * geo.H + h
            keys = _SequenceKeys(geo, k[b, h], None if d_k is None else d_k[b, h])
            values = _SequenceKeys(geo, v[b, h], None if d_v is None else d_v[b, h])
            for n0, n1 in keys.pieces(step):
                yield b, h, seq * geo.nbp, seq * geo.nb, n0, n1, keys, values
