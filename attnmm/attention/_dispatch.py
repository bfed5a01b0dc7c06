"""Choosing a backend from the mask's structure."""

from __future__ import annotations

from attnmm.attention._problem import Problem
from attnmm.attention.backends import Backend, get_backend

#: Backends tried in order by ``backend="auto"``; the reference backend computes everything.
AUTO_ORDER: list[str] = ["sdpa", "reference"]


def choose_backend(problem: Problem, name: str = "auto") -> Backend:
    """The backend for ``problem``: the first of :data:`AUTO_ORDER` that supports it, or ``name``."""
    if name != "auto":
        backend = get_backend(name)
        reason = backend.unsupported(problem)
        if reason is not None:
            raise ValueError(f"backend {name!r} cannot compute this attention: {reason}; use backend='auto'")
        return backend
    for candidate in AUTO_ORDER:
        backend = get_backend(candidate)
        if backend.unsupported(problem) is None:
            return backend
    raise AssertionError("the reference backend supports every problem")  # pragma: no cover
