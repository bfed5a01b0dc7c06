"""A small cache of the sparse forms of recently used masks (pairs and CSR patterns).

Training calls attention with the same mask object and shapes step after step; enumerating the
pairs and sorting them into CSR form every time would cost as much as the attention itself for
cheap masks. Entries are keyed by the mask object (its id, with a reference held so the id stays
unique) and the shapes; masks are definitions and are treated as immutable.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from attnmm.attention._problem import Problem
from attnmm.attention.backends._csr import CSRPattern, Layout
from attnmm.masks import Pairs

#: How many (mask, shape) entries to keep.
CACHE_SIZE = 16

_entries: OrderedDict[tuple[Any, ...], dict[Any, Any]] = OrderedDict()


def _entry(problem: Problem) -> dict[Any, Any] | None:
    mask = problem.mask
    if mask is None:
        return None
    key = (id(mask), problem.L, problem.S, problem.batch_size, str(problem.q.device))
    entry = _entries.get(key)
    if entry is None:
        entry = {"mask": mask}
        _entries[key] = entry
        while len(_entries) > CACHE_SIZE:
            _entries.popitem(last=False)
    else:
        _entries.move_to_end(key)
    return entry


def pairs(problem: Problem) -> Pairs:
    """``problem.pairs()``, shared by every call with the same mask object and shapes."""
    entry = _entry(problem)
    if entry is None:
        return problem.pairs()
    if "pairs" not in entry:
        entry["pairs"] = problem.pairs()
    problem._pairs = entry["pairs"]  # the problem's own cache, so bias checks and weights agree
    return entry["pairs"]


def pattern(problem: Problem, layout: Layout = "head") -> CSRPattern:
    """The CSR pattern of the problem's pairs over its batch and heads, in ``layout`` order."""
    p = pairs(problem)
    entry = _entry(problem)
    key = ("pattern", problem.B, problem.H, layout)
    if entry is not None and key in entry:
        return entry[key]
    wide = p.expand(problem.B) if problem.B > 1 else p
    result = CSRPattern.block_diagonal(wide, problem.B, problem.H, layout)
    if entry is not None:
        entry[key] = result
    return result


def clear() -> None:
    """Forget every cached entry."""
    _entries.clear()
