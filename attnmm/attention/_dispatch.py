"""Choosing a backend: the cheapest registered backend that supports the problem.

Each backend declares what it computes (:attr:`~attnmm.attention.backends.Backend.supports`); the
dispatcher filters the registry by the declarations and, among the backends left, takes the one with
the lowest estimated cost (:meth:`~attnmm.attention.backends.Backend.cost`: seconds from the
calibrated model of :mod:`attnmm.attention.backends._cost`, for this problem's sizes, number of
allowed pairs, structure, heads, head dims, device and whether it trains). Estimates within
:data:`TIE` of the cheapest count as equal (the model's error is about 20%), and among them the
declared :attr:`~attnmm.attention.backends.Backend.preference` decides; backends without an estimate
rank after those with one. For a problem large enough to be checked against the memory available
(:mod:`attnmm.attention._memory`), the backends whose working memory fits come first; the others
follow in the order of preference (so the error raised when none fits names the backend the mask's
structure calls for, with its hint).

On a device without calibrated costs (e.g. CUDA until ``python -m benchmarks.calibrate`` has run
there) the order is the declared preference, with the backends that
:attr:`~attnmm.attention.backends.Backend.materialises` the (L, S) mask after the O(nnz) ones unless
the mask is dense enough: a density (allowed fraction of the L x S matrix) of at least
:data:`DENSE_THRESHOLD`, where the fused dense kernel overtakes the sparse one (see
``benchmarks/density.py``). An empty batch (B = 0 or H = 0) goes to ``reference`` (nothing to
compute).
"""

from __future__ import annotations

import math

import attnmm.attention.backends._calibration as _calibration
from attnmm.attention._memory import SMALL_BYTES, available_bytes, ceiling_bytes
from attnmm.attention._problem import Problem
from attnmm.attention.backends._registry import get_backend, list_backends
from attnmm.attention.backends.base import Backend

#: Density from which masked dense SDPA beats the sparse backend on a device without calibrated
#: costs: the crossover measured by ``python -m benchmarks.density`` (forward + backward, fp32, 2 CPU
#: threads, L = S = 2048, H = 4, E = 64) lay between 0.22 and 0.29 in repeated runs.
DENSE_THRESHOLD: float = 0.25

#: Relative margin within which two cost estimates count as equal.
TIE: float = 0.1

#: Rank added to a materialising backend when the mask is sparser than :data:`DENSE_THRESHOLD`.
_SPARSE_PENALTY = 1000


def _by_preference(problem: Problem, usable: list[Backend]) -> list[Backend]:
    kind = problem.structure.kind
    dense = kind in ("full", "causal")
    if not dense and any(b.materialises for b in usable):
        dense = problem.layout == "padded" and problem.density >= DENSE_THRESHOLD
    return sorted(usable, key=lambda b: b.preference + (_SPARSE_PENALTY if b.materialises and not dense else 0))


def candidates(problem: Problem) -> list[Backend]:
    """The registered backends that support ``problem``, best first."""
    if problem.B == 0 or problem.H == 0:
        return [get_backend("reference")]  # an empty batch: nothing to compute, and the reference takes any shape
    usable = [b for b in map(get_backend, list_backends()) if b.unsupported(problem) is None]
    if problem.q.device.type not in _calibration.COSTS:
        return _by_preference(problem, usable)
    if ceiling_bytes(problem) >= SMALL_BYTES:  # a large problem: what fits in memory comes first
        needs = {b.name: b.memory_bytes(problem) for b in usable}
        available = available_bytes(problem.q.device) if max(needs.values()) >= SMALL_BYTES else None
        if available is not None:
            fitting = [b for b in usable if needs[b.name] <= available]
            too_big = [b for b in usable if needs[b.name] > available]
            if too_big:  # the order followed the memory free now, which may change
                problem.__dict__["memory_bound"] = True
            return _by_cost(problem, fitting) + _by_preference(problem, too_big)
    return _by_cost(problem, usable)


def _by_cost(problem: Problem, usable: list[Backend]) -> list[Backend]:
    if not usable:
        return []
    costs = {b.name: b.cost(problem) for b in usable}
    ranked = sorted(usable, key=lambda b: (math.inf if costs[b.name] is None else costs[b.name], b.preference))
    best = costs[ranked[0].name]
    if best is None:
        return ranked
    tied = [b for b in ranked if costs[b.name] is not None and costs[b.name] <= best * (1 + TIE)]
    tied.sort(key=lambda b: b.preference)
    return tied + [b for b in ranked if b not in tied]


def choose_backend(problem: Problem, name: str = "auto") -> Backend:
    """The backend for ``problem``: ``name``, or for ``"auto"`` the first of :func:`candidates`."""
    if name != "auto":
        backend = get_backend(name)
        reason = backend.unsupported(problem)
        if reason is not None:
            raise ValueError(f"backend {name!r} cannot compute this attention: {reason}; use backend='auto'")
        return backend
    found = candidates(problem)
    assert found, "the reference backend supports every problem"
    return found[0]
