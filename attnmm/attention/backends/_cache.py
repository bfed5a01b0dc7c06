"""A small cache of the derived forms of recently used masks: pairs, CSR patterns, dense masks.

Every layer of a forward attends under the same mask, and training sees the same masks (a grid, a
graph) or masks of the same lengths step after step; enumerating the pairs, sorting them into CSR
form or materialising the dense mask for every call would cost as much as the attention itself for
cheap masks. Entries are keyed by the mask's content (:func:`~attnmm.masks._key.content_key`: its
type, parameters and tensors' values), not by the object, so masks rebuilt per batch by an adapter
hit too, and by the shapes; masks are definitions and are treated as immutable.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from torch import Tensor

from attnmm.attention.backends._csr import CSRPattern, Layout
from attnmm.masks import Pairs
from attnmm.masks._key import content_key

if TYPE_CHECKING:  # (the problem asks this module for its pairs)
    from attnmm.attention._problem import Problem

#: How many (mask, shape) entries to keep.
CACHE_SIZE = 16

#: Dense masks above this many entries are not kept (16 of them would hold too much memory).
DENSE_ELEMENTS = 1 << 24

_entries: OrderedDict[tuple[Any, ...], dict[Any, Any]] = OrderedDict()

#: How many times each form was built (not found in the cache), for tests and benchmarks.
builds: dict[str, int] = {"pairs": 0, "pattern": 0, "dense": 0}


def _entry(problem: Problem) -> dict[Any, Any] | None:
    mask = problem.mask
    if mask is None:
        return None
    key = (content_key(mask), problem.L, problem.S, problem.batch_size, str(problem.q.device))
    entry = _entries.get(key)
    if entry is None:
        entry = {"mask": mask}  # held: tensors keyed by identity keep their ids unique
        _entries[key] = entry
        while len(_entries) > CACHE_SIZE:
            _entries.popitem(last=False)
    else:
        _entries.move_to_end(key)
    return entry


def pairs(problem: Problem) -> Pairs:
    """The mask's allowed pairs for the problem's shapes, shared by every call with an equal mask."""
    if problem._pairs is not None:
        return problem._pairs
    entry = _entry(problem)
    if entry is None or "pairs" not in entry:
        builds["pairs"] += 1
        found = problem.effective_mask.pairs(problem.L, problem.S, problem.batch_size, device=problem.q.device)
        if entry is not None:
            entry["pairs"] = found
    else:
        found = entry["pairs"]
    problem._pairs = found  # the problem's own cache, so bias checks and weights agree
    return found


def pattern(problem: Problem, layout: Layout = "head") -> CSRPattern:
    """The CSR pattern of the problem's pairs over its batch and heads, in ``layout`` order."""
    p = pairs(problem)
    entry = _entry(problem)
    key = ("pattern", problem.B, problem.H, layout)
    if entry is not None and key in entry:
        return entry[key]
    builds["pattern"] += 1
    wide = p.expand(problem.B) if problem.B > 1 else p
    result = CSRPattern.block_diagonal(wide, problem.B, problem.H, layout)
    if entry is not None:
        entry[key] = result
    return result


def dense(problem: Problem) -> Tensor:
    """The mask's dense form (L, S) or (B, L, S) on the inputs' device, shared like the pairs (up to
    :data:`DENSE_ELEMENTS` entries)."""
    entry = _entry(problem)
    if entry is not None and "dense" in entry:
        return entry["dense"]
    builds["dense"] += 1
    result = problem.effective_mask.dense(problem.L, problem.S, problem.batch_size, device=problem.q.device)
    if entry is not None and result.numel() <= DENSE_ELEMENTS:
        entry["dense"] = result
    return result


def clear() -> None:
    """Forget every cached entry."""
    _entries.clear()
