"""Cheap facts about a problem's allowed sets, for dispatch: row sizes and density."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm.attention._problem import Problem
from attnmm.attention.backends import _cache
from attnmm.masks.base import IntervalMask


def row_counts(problem: Problem) -> Tensor:
    """|A_b(i)| for every query, (B or 1, L): from the intervals of an interval mask in O(L),
    else from the mask's pairs (computed once per call and shared with the sparse backend)."""
    mask = problem.effective_mask
    L, S, bsz = problem.L, problem.S, problem.batch_size
    items = 1 if bsz is None else bsz  # (an empty batch has 0 items, not 1)
    if L == 0:
        return torch.zeros(items, 0, dtype=torch.long)
    if isinstance(mask, IntervalMask):
        i = torch.arange(L).view(1, -1)
        b = torch.zeros((), dtype=torch.long) if bsz is None else torch.arange(bsz).view(-1, 1)
        start, end = mask.interval(b, i)
        start, end = start.clamp(0, S), end.clamp(0, S)
        return (end - start).clamp_min(0).expand(items, L)
    pairs = _cache.pairs(problem)
    counts = torch.bincount(pairs.segment().cpu(), minlength=pairs.num_segments)
    return counts.view(-1, L)


def density(problem: Problem) -> float:
    """Fraction of the (B x) L x S score matrix that is allowed."""
    counts = row_counts(problem)
    total = counts.size(0) * problem.L * problem.S
    return float(counts.sum()) / total if total else 0.0


def allowed_pairs(problem: Problem) -> int:
    """Allowed (query, key) pairs over all B batch items."""
    counts = row_counts(problem)
    total = int(counts.sum())
    return total * problem.B if counts.size(0) == 1 and problem.batch_size is None else total
