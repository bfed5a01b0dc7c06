"""Choosing a backend from the mask's structure.

=====================================  ==============================================================
mask structure                         backends tried, in order
=====================================  ==============================================================
none, full, causal                     ``sdpa`` (fused), then ``reference``
band (Window, Chunk, causal windows)   ``flex`` (CUDA), ``band``
interval (e.g. Causal & Padding)       ``flex`` (CUDA), ``sdpa_mask`` if dense enough, ``sparse``
sparse (Grid, compositions)            ``flex`` (CUDA), ``sdpa_mask``/``reference`` if dense enough,
                                       else ``sparse``
graph (packed layout)                  ``sparse``
an empty batch (B = 0 or H = 0)        ``reference`` (nothing to compute)
=====================================  ==============================================================

"Dense enough" means a density (allowed fraction of the L x S matrix) of at least
:data:`DENSE_THRESHOLD`, where the fused dense kernel overtakes the sparse one; see
``benchmarks/density.py`` and ``docs/benchmarks.md`` for the measurement.
"""

from __future__ import annotations

from attnmm.attention._problem import Problem
from attnmm.attention.backends import Backend, get_backend
from attnmm.attention.backends._rows import density

#: Every backend ``backend="auto"`` may pick, in order of preference; the reference computes everything.
AUTO_ORDER: list[str] = ["flex", "sdpa", "band", "sdpa_mask", "sparse", "reference"]

#: Density from which masked dense SDPA beats the sparse backend: the crossover measured by
#: ``python -m benchmarks.density`` (forward + backward, fp32, 2 CPU threads, L = S = 2048, H = 4,
#: E = 64) lay between 0.22 and 0.29 in repeated runs; see docs/benchmarks.md.
DENSE_THRESHOLD: float = 0.25


def candidates(problem: Problem) -> list[str]:
    """Backend names to try for ``problem``, best first, from the mask's structure."""
    mask = problem.effective_mask
    kind = mask.structure.kind
    if problem.B == 0 or problem.H == 0:
        return ["reference"]  # an empty batch: nothing to compute, and the reference takes any shape
    if kind in ("full", "causal"):
        return ["sdpa", "reference"]
    first = ["flex"] if problem.q.is_cuda else []
    if kind == "band":
        return [*first, "band", "sparse", "reference"]
    if mask.layout == "packed":
        return ["sparse", "reference"]
    dense = density(problem) >= DENSE_THRESHOLD
    if kind == "interval":
        return [*first, *(["sdpa_mask", "sparse"] if dense else ["sparse"]), "reference"]
    return [*first, *(["sdpa_mask", "reference"] if dense else ["sparse", "reference"])]


def choose_backend(problem: Problem, name: str = "auto") -> Backend:
    """The backend for ``problem``: ``name``, or for ``"auto"`` the first of :func:`candidates` that
    supports it."""
    if name != "auto":
        backend = get_backend(name)
        reason = backend.unsupported(problem)
        if reason is not None:
            raise ValueError(f"backend {name!r} cannot compute this attention: {reason}; use backend='auto'")
        return backend
    for candidate in candidates(problem):
        backend = get_backend(candidate)
        if backend.unsupported(problem) is None:
            return backend
    raise AssertionError("the reference backend supports every problem")  # pragma: no cover
