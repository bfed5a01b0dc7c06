r"""The segments backend: a :class:`~attnmm.masks.Segments` mask computed query segment by query
segment, each on the backend its own blocks call for."""

from __future__ import annotations

from torch import Tensor

from attnmm.attention.backends._sizes import output_bytes
from attnmm.attention.backends._split import SplitAttention, row_problem
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem


class SegmentsBackend(Backend):
    r"""Attention under a :class:`~attnmm.masks.Segments` mask, one query segment at a time.

    The allowed set of a query of segment :math:`a` lies in the key segments :math:`C_a` it links to,
    so its softmax involves only those keys:
    :math:`O_a = \mathrm{attend}(Q_a, K_{C_a}, V_{C_a}, M_a)` with :math:`M_a` its row of blocks
    (:meth:`Segments.row(a) <attnmm.masks.Segments.row>`), and :math:`O = [O_1; \dots; O_K]`. Each of
    these K attentions is dispatched on its own before the call runs
    (:func:`~attnmm.attention.planner.split_problem`: under ``Window`` on the band kernel, under
    ``Causal`` on fused SDPA, under ``Grid`` on the sparse kernel, its keys read in place or laid
    together), and all of them run as one autograd node that adds their gradients into one buffer per
    input (:mod:`~attnmm.attention.backends._split`). Its cost is the sum of the segments' estimates,
    so dispatch compares it with computing the whole mask on one backend. The queries of a segment
    past an item's length get output 0 (and gradient 0). Softmax or ReLU scores and dropout; no bias
    and no returned weights (the sparse backend computes those).

    Packed documents are segments too: ``Documents(lengths)`` with one packing shared by the batch,
    alone or intersected with other masks, is computed as the segments of its documents
    (:func:`~attnmm.masks.as_blocks`): each document's causal attention is one fused SDPA call, with
    nothing compiled per set of lengths.

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

    def check(self, problem: Problem, forms: Forms) -> str | None:
        if forms.splits.get(problem) is None:
            return "the mask is not made of blocks (a Segments mask, packed Documents, their intersections)"
        return None

    def cost(self, problem: Problem, forms: Forms) -> float | None:
        """The sum of the estimated costs of every query segment on its chosen backend (``None`` when
        one of them has no estimate)."""
        split = forms.splits.get(problem)
        return None if split is None else split.cost

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        """The query segments' working memory on their chosen backends and the output: in training every
        segment's (each keeps what its backward needs) and one gradient buffer per input (what the one
        backward adds into); without a gradient the largest segment's (they run one after another)."""
        split = forms.splits.get(problem)
        if split is None:
            return 0
        rows = [r.backend.memory_bytes(row_problem(problem, split, r), r.forms) for r in split.rows if r] or [0]
        if not problem.training:
            return max(rows) + output_bytes(problem)
        inputs = problem.B * problem.H * (problem.L * problem.E + problem.S * (problem.E + problem.Ev))
        return sum(rows) + output_bytes(problem) + inputs * problem.dtype.itemsize

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        split = forms.splits[problem]
        assert split is not None
        # the query segments one after another, as one autograd node (without a gradient, nothing is kept)
        return SplitAttention.apply(inputs.q, inputs.k, inputs.v, problem, split), None  # (B, H, L, Ev)
