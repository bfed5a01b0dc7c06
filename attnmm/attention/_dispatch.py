"""Choosing a backend: the registered backends that support the problem, in order of preference.

Each backend declares what it computes (:attr:`~attnmm.attention.backends.Backend.supports`) and its
:attr:`~attnmm.attention.backends.Backend.preference`; the dispatcher filters the registry by the
declarations and takes the most preferred. A backend that
:attr:`~attnmm.attention.backends.Backend.materialises` the (L, S) mask ranks after the O(nnz)
ones unless the mask is dense enough: a density (allowed fraction of the L x S matrix) of at least
:data:`DENSE_THRESHOLD`, where the fused dense kernel overtakes the sparse one; see
``benchmarks/density.py`` and ``docs/benchmarks.md`` for the measurement. An empty batch
(B = 0 or H = 0) goes to ``reference`` (nothing to compute).
"""

from __future__ import annotations

from attnmm.attention._problem import Problem
from attnmm.attention.backends import Backend, get_backend, list_backends
from attnmm.attention.backends._rows import density

#: Density from which masked dense SDPA beats the sparse backend: the crossover measured by
#: ``python -m benchmarks.density`` (forward + backward, fp32, 2 CPU threads, L = S = 2048, H = 4,
#: E = 64) lay between 0.22 and 0.29 in repeated runs; see docs/benchmarks.md.
DENSE_THRESHOLD: float = 0.25

#: Rank added to a materialising backend when the mask is sparser than :data:`DENSE_THRESHOLD`.
_SPARSE_PENALTY = 1000


def _ranked(problem: Problem) -> list[Backend]:
    """Every registered backend, best first for ``problem`` (supported or not)."""
    if problem.B == 0 or problem.H == 0:
        return [get_backend("reference")]  # an empty batch: nothing to compute, and the reference takes any shape
    registered = [get_backend(name) for name in list_backends()]
    kind = problem.effective_mask.structure.kind
    if kind in ("full", "causal"):
        dense = True
    elif any(b.materialises for b in registered):
        # (the threshold was measured on padded masks)
        dense = problem.layout == "padded" and density(problem) >= DENSE_THRESHOLD
    else:
        dense = False
    return sorted(registered, key=lambda b: b.preference + (_SPARSE_PENALTY if b.materialises and not dense else 0))


def candidates(problem: Problem) -> list[Backend]:
    """The registered backends that support ``problem``, best first."""
    return [b for b in _ranked(problem) if b.unsupported(problem) is None]


def choose_backend(problem: Problem, name: str = "auto") -> Backend:
    """The backend for ``problem``: ``name``, or for ``"auto"`` the first of :func:`candidates`."""
    if name != "auto":
        backend = get_backend(name)
        reason = backend.unsupported(problem)
        if reason is not None:
            raise ValueError(f"backend {name!r} cannot compute this attention: {reason}; use backend='auto'")
        return backend
    for backend in _ranked(problem):
        if backend.unsupported(problem) is None:
            return backend
    raise AssertionError("the reference backend supports every problem")  # pragma: no cover
