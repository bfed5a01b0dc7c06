r"""The segments backend: a :class:`~attnmm.masks.Segments` mask computed query segment by query
segment, each on the backend its own blocks call for."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from attnmm.attention._problem import Problem
from attnmm.attention.backends._sizes import output_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.masks import Mask, Segments


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
    kernel; a segment linked to several keeps its row of blocks (sparse, or dense where dense wins),
    over its linked keys laid one after another or, where that is not estimated cheaper (a sparse
    row, whose cost follows its pairs), over all the keys in place, so nothing is copied.
    The queries of a segment past an item's length get output 0 (and gradient 0). Gradients flow
    through one split of each input and the concatenations. Its cost is the sum of the cost of every
    segment's chosen backend, so the dispatcher compares it with computing the whole mask on one
    backend; each segment's backend is chosen once per call (cost, memory and forward share it).
    Softmax or ReLU scores and dropout; no bias and no returned weights (the sparse backend computes
    those).

    Packed documents are segments too: ``Documents(lengths)`` with one packing shared by the batch,
    alone or intersected with other masks, is computed as the :class:`~attnmm.masks.Segments` of its
    documents, each with the other masks seen from the document's offset
    (:meth:`Mask.as_blocks <attnmm.masks.Mask.as_blocks>`): each document's causal attention is one
    fused SDPA call, with nothing compiled per set of lengths.

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
        structures=frozenset({"segments", "band", "interval", "sparse"}), layouts=frozenset({"padded"}), bias=False,
        weights=False,
        empty=False,
    )
    preference = 15

    def check(self, problem: Problem) -> str | None:
        if _view(problem) is None:
            return (
                f"the mask {problem.effective_mask!r:.80} is neither a Segments mask nor packed documents "
                "(Documents shared by the batch, maybe & Causal, Window or Full)"
            )
        return None

    def cost(self, problem: Problem) -> float | None:
        """The sum of the estimated costs of every query segment on its chosen backend (``None`` when
        one of them has no estimate)."""
        total = 0.0
        for step in _plan(problem).values():
            if step is None:
                continue
            if step.cost is None:
                return None
            total += step.cost
        return total

    def memory_bytes(self, problem: Problem) -> int:
        """The sum of every query segment's chosen backend's working memory, and the output."""
        if _view(problem) is None:
            return 0
        steps = [step for step in _plan(problem).values() if step is not None]
        return sum(step.backend.memory_bytes(step.problem) for step in steps) + output_bytes(problem)

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        from attnmm.attention._memory import check_backend, check_pairs

        mask = _view(problem)
        assert mask is not None
        q, v = problem.q, problem.v
        B = problem.B
        outs = []
        plan = _plan(problem)
        problem.__dict__.pop(_PLAN, None)  # the sub-problems hold views of the inputs: not kept past the call
        for a, step in plan.items():
            n = mask.sizes[a]
            if step is None or n == 0:  # no key segment linked: every query of the segment attends nothing
                outs.append(_Nothing.apply(q[:, :, mask.offsets[a] : mask.offsets[a + 1]], problem.k, v))
                continue
            check_pairs(step.problem, with_bias=False)
            check_backend(step.problem, step.backend)
            out, _ = step.backend.forward(step.problem)  # (B, H, n_a, Ev)
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


class _Step(NamedTuple):
    """One query segment's attention, the backend dispatch chose for it and that backend's estimate."""

    problem: Problem
    backend: Backend
    cost: float | None


#: Where a problem keeps its plan between dispatch (cost, memory) and the forward of one call.
_PLAN = "_segments_plan"


def _plan(problem: Problem) -> dict[int, _Step | None]:
    """Every query segment's sub-problem and chosen backend (``None``: no link), worked out once per
    call: dispatch asks for the cost and the memory and then runs the forward on the same
    :class:`Problem`, and each sub-problem's choice counts its rows' keys, so the plan is kept on the
    problem (as :func:`functools.cached_property` keeps a value) until the forward takes it."""
    from attnmm.attention import _dispatch  # (dispatch imports the registry, which holds this backend)

    plan = problem.__dict__.get(_PLAN)
    if plan is None:
        plan = {}
        for a, forms in _rows(problem).items():
            steps = []
            for sub in forms:
                chosen = _dispatch.candidates(sub)[0]
                steps.append(_Step(sub, chosen, chosen.cost(sub)))
            plan[a] = _cheapest(steps)
            if len(steps) == 2 and plan[a] is steps[0]:  # the keys laid together: now for real
                plan[a] = steps[0]._replace(problem=_laid_together(problem, a))
        problem.__dict__[_PLAN] = plan
    return plan


def _cheapest(steps: list[_Step]) -> _Step | None:
    """The one step, or of the two forms of a segment linked to several (:func:`_rows`) the keys in
    place unless laying them together is estimated cheaper (or a cost is unknown)."""
    if len(steps) < 2:
        return steps[0] if steps else None
    together, over_all = steps
    if together.cost is None or over_all.cost is None or together.cost < over_all.cost * (1 - 1e-6):
        return together
    return over_all


def _rows(problem: Problem) -> dict[int, list[Problem]]:
    """The attention of every query segment over its linked key segments, in the forms it may take
    (none: no link). A segment linked to one key segment, or to all, uses the inputs as they are. A
    segment linked to several is a choice: their keys laid one after another (a copy, which keeps a
    dense or banded block's cost to its own keys), first in the list, or all the keys in their own
    places, the blocks of unlinked segments empty (no copy, and as cheap for kernels whose cost
    follows the allowed pairs; a slice of the inputs would not spare the copy: its backward writes
    into a zero tensor of the input's size). The first form's keys are a stand-in of the right shape
    until it is chosen (:func:`_laid_together`)."""
    mask = _view(problem)
    assert mask is not None
    # one split of each input, not a slice per segment: a slice's backward writes its gradient into a
    # zero tensor of the input's full size, a split's joins every segment's gradient in one pass
    qs, ks, vs = (t.split(list(mask.sizes), dim=2) for t in (problem.q, problem.k, problem.v))
    rows: dict[int, list[Problem]] = {}
    for a in range(mask.num_segments):
        cs, row_mask = mask.row(a)
        if row_mask is None:
            rows[a] = []
            continue
        if len(cs) == mask.num_segments:  # every segment, in order: the inputs themselves
            rows[a] = [_sub(problem, qs[a], problem.k, problem.v, row_mask)]
        elif len(cs) == 1:
            rows[a] = [_sub(problem, qs[a], ks[cs[0]], vs[cs[0]], row_mask)]
        else:
            S_a = sum(mask.sizes[c] for c in cs)
            B, H, E, Ev = problem.B, problem.H, problem.k.size(-1), problem.v.size(-1)
            keys = problem.k.new_zeros(()).expand(B, H, S_a, E)  # a stand-in: no memory
            values = problem.v.new_zeros(()).expand(B, H, S_a, Ev)
            over_all = mask.row_over_all(a)
            assert over_all is not None
            rows[a] = [
                _sub(problem, qs[a], keys, values, row_mask),
                _sub(problem, qs[a], problem.k, problem.v, over_all),
            ]
    return rows


def _laid_together(problem: Problem, a: int) -> Problem:
    """Query segment ``a``'s attention over its linked key segments' keys copied one after another."""
    mask = _view(problem)
    assert mask is not None
    cs, row_mask = mask.row(a)
    assert row_mask is not None
    qs, ks, vs = (t.split(list(mask.sizes), dim=2) for t in (problem.q, problem.k, problem.v))
    keys = torch.cat([ks[c] for c in cs], dim=2)  # (B, H, S_a, E)
    values = torch.cat([vs[c] for c in cs], dim=2)  # (B, H, S_a, Ev)
    return _sub(problem, qs[a], keys, values, row_mask)


def _sub(problem: Problem, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Problem:
    return Problem(
        q,  # (B, H, n_a, E)
        k,
        v,
        mask,
        scale=problem.scale,
        dropout_p=problem.dropout_p,
        score=problem.score,
        bias=None,
        return_weights=False,
        packed=False,
    )


def _view(problem: Problem) -> Segments | None:
    """The problem's mask as :class:`~attnmm.masks.Segments` (:attr:`Problem.blocks`)."""
    return problem.blocks
