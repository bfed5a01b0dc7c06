r"""The segments backend: a :class:`~attnmm.masks.Segments` mask computed query segment by query
segment, each on the backend its own blocks call for."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnmm.attention._problem import Problem
from attnmm.attention.backends._sizes import output_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.masks import Segments


class SegmentsBackend(Backend):
    r"""Attention under a :class:`~attnmm.masks.Segments` mask, one query segment at a time.

    The allowed set of a query of segment :math:`a` lies in the key segments :math:`a` links to, so
    its softmax involves only those keys: with :math:`Q_a` the queries of segment :math:`a` and
    :math:`K_{C_a}, V_{C_a}` the keys and values of its linked segments :math:`C_a` laid one after
    another,

    .. math::
        O_a = \mathrm{attend}\left(Q_a, K_{C_a}, V_{C_a}, M_a\right), \qquad
        O = [O_1; \dots; O_K]

    where :math:`M_a` is :meth:`Segments.row(a) <attnmm.masks.Segments.row>`. Each of these K
    attentions is dispatched on its own: a segment that only attends itself under ``Window`` runs on
    the band kernel, under ``Causal`` or full attention on fused SDPA, under ``Grid`` on the sparse
    kernel; a segment linked to several keeps its row of blocks (sparse, or dense where dense wins).
    The queries of a segment past an item's length get output 0 (and gradient 0). Gradients flow
    through the slices and the concatenation. Its cost is the sum of the cost of every segment's
    chosen backend, so the dispatcher compares it with computing the whole mask on one backend.
    Softmax or ReLU scores and dropout; no bias and no returned weights (the sparse backend computes
    those).

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Causal, Grid, Segments, Window
        >>> mask = Segments([16, 40, 8], within=[Grid(4, 4, kernel=3), Window(4, 0), Causal()],
        ...                 lengths=[[16, 40, 8], [16, 0, 5]])
        >>> q = k = v = torch.randn(2, 4, 64, 16)  # (B, H, L, E)
        >>> out = attend(q, k, v, mask, backend="segments")
        >>> torch.allclose(out, attend(q, k, v, mask, backend="reference"), atol=1e-5)
        True
    """

    name = "segments"
    supports = Supports(
        structures=frozenset({"segments"}), layouts=frozenset({"padded"}), bias=False, weights=False, empty=False
    )
    preference = 15

    def check(self, problem: Problem) -> str | None:
        if not isinstance(problem.effective_mask, Segments):  # pragma: no cover - only Segments say "segments"
            return f"the mask {type(problem.effective_mask).__name__} is not a Segments mask"
        return None

    def cost(self, problem: Problem) -> float | None:
        """The sum of the estimated costs of every query segment on its chosen backend (``None`` when
        one of them has no estimate)."""
        from attnmm.attention._dispatch import candidates

        total = 0.0
        for sub in _rows(problem).values():
            if sub is None:
                continue
            cost = candidates(sub)[0].cost(sub)
            if cost is None:
                return None
            total += cost
        return total

    def memory_bytes(self, problem: Problem) -> int:
        """The sum of every query segment's chosen backend's working memory, and the output."""
        if not isinstance(problem.effective_mask, Segments):
            return 0
        from attnmm.attention._dispatch import candidates

        subs = [sub for sub in _rows(problem).values() if sub is not None]
        return sum(candidates(sub)[0].memory_bytes(sub) for sub in subs) + output_bytes(problem)

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        from attnmm.attention._dispatch import choose_backend
        from attnmm.attention._memory import check_backend, check_pairs

        mask = problem.effective_mask
        assert isinstance(mask, Segments)
        q, v = problem.q, problem.v
        B = problem.B
        outs = []
        for a, sub in _rows(problem).items():
            n = mask.sizes[a]
            if sub is None or n == 0:  # no key segment linked: every query of the segment attends nothing
                outs.append(_Nothing.apply(q[:, :, mask.offsets[a] : mask.offsets[a + 1]], problem.k, v))
                continue
            check_pairs(sub, with_bias=False)
            chosen = choose_backend(sub)
            check_backend(sub, chosen)
            out, _ = chosen.forward(sub)  # (B, H, n_a, Ev)
            if mask.lengths is not None:  # the segment's padded queries attend nothing
                real = torch.arange(n, device=q.device) < mask.lengths[:, a].to(q.device).view(-1, 1)  # (B, n_a)
                out = torch.where(real.view(B, 1, n, 1), out, out.new_zeros(()))
            outs.append(out)
        return torch.cat(outs, dim=2), None  # (B, H, L, Ev)


class _Nothing(torch.autograd.Function):
    """The output of queries that attend nothing: q (B, H, n, E), k, v (B, H, S, Ev) -> zeros
    (B, H, n, Ev), with zero gradients."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return v.new_zeros(*q.shape[:-1], v.size(-1))

    @staticmethod
    def backward(ctx: Any, d_out: Tensor) -> tuple[None, None, None]:
        return None, None, None


def _rows(problem: Problem) -> dict[int, Problem | None]:
    """The attention of every query segment over its linked key segments (``None``: no link)."""
    mask = problem.effective_mask
    assert isinstance(mask, Segments)
    q, k, v = problem.q, problem.k, problem.v
    offsets = mask.offsets
    rows: dict[int, Problem | None] = {}
    for a in range(mask.num_segments):
        cs, row_mask = mask.row(a)
        if row_mask is None:
            rows[a] = None
            continue
        if cs == list(range(cs[0], cs[-1] + 1)):  # consecutive segments: one slice, no copy
            keys, values = k[:, :, offsets[cs[0]] : offsets[cs[-1] + 1]], v[:, :, offsets[cs[0]] : offsets[cs[-1] + 1]]
        else:
            keys = torch.cat([k[:, :, offsets[c] : offsets[c + 1]] for c in cs], dim=2)  # (B, H, S_a, E)
            values = torch.cat([v[:, :, offsets[c] : offsets[c + 1]] for c in cs], dim=2)  # (B, H, S_a, Ev)
        rows[a] = Problem(
            q[:, :, offsets[a] : offsets[a + 1]],  # (B, H, n_a, E)
            keys,
            values,
            row_mask,
            scale=problem.scale,
            dropout_p=problem.dropout_p,
            score=problem.score,
            bias=None,
            return_weights=False,
            packed=False,
        )
    return rows
