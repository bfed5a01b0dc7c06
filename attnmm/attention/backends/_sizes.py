"""Size arithmetic the backends' cost estimates share: bytes of the output, of dense scores and masks,
and a bound on the allowed pairs. Each backend owns its estimate
(:meth:`~attnmm.attention.backends.Backend.memory_bytes`); the core's pre-flight check
(:mod:`attnmm.attention.backends._memory`) compares it with the memory available."""

from __future__ import annotations

import torch

from attnmm.attention.problem import Problem

#: Working memory below this many bytes is small: pair counts under it are bounded by L * S without
#: asking the mask, and estimates under it are never checked against the available memory.
SMALL_BYTES = 1 << 28

#: Bytes of one enumerated pair: row and column, and the batch item, as int64.
PAIR_BYTES = 24


def compute_bytes(dtype: torch.dtype) -> int:
    """Bytes per element of the dtype the backends compute in (half precision is computed in float32)."""
    return 4 if dtype in (torch.float16, torch.bfloat16) else dtype.itemsize


def output_bytes(problem: Problem) -> int:
    """Bytes of the output (B, H, L, Ev)."""
    return problem.B * problem.H * problem.L * problem.Ev * problem.dtype.itemsize


def dense_bytes(problem: Problem, per_score: int, per_mask: int) -> int:
    """Bytes of ``per_score`` bytes for each of the B * H * L * S scores and ``per_mask`` bytes for each
    entry of the (B or 1, L, S) mask, plus the output."""
    scores = problem.B * problem.H * problem.L * problem.S
    entries = (problem.batch_size or 1) * problem.L * problem.S
    return scores * per_score + entries * per_mask + output_bytes(problem)


def max_pairs(problem: Problem) -> int | None:
    """An upper bound on the mask's allowed pairs, counted over the mask's batch items (B for a
    batched mask, else 1), without enumerating them; ``None`` when the mask cannot tell."""
    items = problem.batch_size or 1
    ceiling = items * problem.L * problem.S
    if ceiling * PAIR_BYTES < SMALL_BYTES:
        return ceiling
    return problem.effective_mask.nnz_bound(problem.L, problem.S, problem.batch_size)
