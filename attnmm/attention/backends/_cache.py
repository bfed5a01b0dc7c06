"""The derived forms of masks (pairs, CSR patterns, dense masks): built once per forward, and kept across
calls in a small cache keyed by content, within a byte budget.

Every layer of a forward attends under the same mask, and training sees the same masks (a grid, a
window) or masks of the same lengths step after step; enumerating the pairs, sorting them into CSR
form or materialising the dense mask for every call would cost as much as the attention itself for
cheap masks. Two places keep a form:

- the problem's ``forms``, which an :class:`~attnmm.attention.AttentionPlan` shares among the layers
  of one forward: every mask's forms are built at most once per forward;
- a cache across calls, keyed by the mask's content (:func:`~attnmm.masks._key.value_key`: its
  type, parameters and tensors' values) and the shapes, so masks rebuilt per batch by an adapter hit
  too. A mask holding a tensor that the key can only name by identity (a large tensor, or one on an
  accelerator, whose values would cost a pass or a device synchronisation to read) is never kept
  across calls: an in-place edit of that tensor could otherwise reuse a stale form. The cache holds
  at most :data:`CACHE_SIZE` masks and :func:`budget` bytes (least recently used first out; a form
  larger than the budget is not kept). What it keeps is O(nnz) integers shared by the heads (the
  pairs and one CSR pattern per mask) and dense masks of up to :data:`DENSE_ELEMENTS` entries.

Layers keep what they derive from their own inputs in the same cache and budget (:func:`find`,
:func:`keep`): a graph layer's edge layout, keyed by the value of its edge_index (and never kept when
the edge_index can only be named by identity).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from attnmm.attention.backends._csr import CSRPattern
from attnmm.masks import Pairs
from attnmm.masks._key import value_key

if TYPE_CHECKING:  # (the problem asks this module for its pairs)
    from attnmm.attention._problem import Problem

#: How many (mask, shape) entries to keep at most.
CACHE_SIZE = 16

#: Environment variable giving the default byte budget of the cache.
BUDGET_ENV = "ATTNMM_MASK_CACHE_BYTES"

#: Dense masks above this many entries are not kept.
DENSE_ELEMENTS = 1 << 24

_budget = int(os.environ.get(BUDGET_ENV, 64 * 2**20))

_entries: OrderedDict[Hashable, dict[Hashable, Any]] = OrderedDict()

#: How many times each form was built (not found in a problem's forms or the cache), for tests and
#: benchmarks.
builds: dict[str, int] = {"pairs": 0, "pattern": 0, "dense": 0}


def budget() -> int:
    """The bytes the cache may hold (default 64 MiB, or ``$ATTNMM_MASK_CACHE_BYTES``)."""
    return _budget


def set_budget(nbytes: int) -> int:
    """Let the cache hold up to ``nbytes`` bytes (0 keeps nothing across calls), evicting the least
    recently used entries beyond it; returns the previous budget."""
    global _budget
    if nbytes < 0:
        raise ValueError(f"the cache budget must be >= 0 bytes, got {nbytes}")
    previous, _budget = _budget, int(nbytes)
    _evict()
    return previous


def held_bytes() -> int:
    """Bytes the cache holds now."""
    return sum(_entry_bytes(entry) for entry in _entries.values())


def _entry_bytes(entry: dict[Hashable, Any]) -> int:
    return sum(_nbytes(form) for form in entry.values())


def _nbytes(form: Any) -> int:
    if isinstance(form, Tensor):
        return form.numel() * form.element_size()
    if isinstance(form, Pairs):
        return sum(_nbytes(t) for t in (form.row, form.col, form.batch) if t is not None)
    nbytes = getattr(form, "nbytes", 0)  # a CSRPattern, or a layer's form that counts its bytes
    return int(nbytes) if isinstance(nbytes, int) else 0


def _evict() -> None:
    total = held_bytes()
    while _entries and (total > _budget or len(_entries) > CACHE_SIZE):
        _, entry = _entries.popitem(last=False)
        total -= _entry_bytes(entry)


def _key(problem: Problem) -> Hashable | None:
    """The cache key of the problem's mask and shapes, or ``None`` when the mask is not keyed by value
    alone (then its forms live for one forward only)."""
    forms = problem.forms
    if "key" not in forms:
        key = None
        mask_key = None if problem.mask is None else value_key(problem.mask)
        if mask_key is not None:
            key = (mask_key, problem.L, problem.S, problem.batch_size, str(problem.q.device))
        forms["key"] = key
    return forms["key"]


def _cached(problem: Problem, name: Hashable) -> Any:
    """The form ``name`` from the problem's forms (this forward) or the cache, else ``None``."""
    if name in problem.forms:
        return problem.forms[name]
    key = _key(problem)
    entry = _entries.get(key) if key is not None else None
    if entry is None or name not in entry:
        return None
    _entries.move_to_end(key)
    problem.forms[name] = entry[name]
    return entry[name]


def _keep(
    problem: Problem, name: Hashable, form: Any, across_calls: bool = True, drop: str | None = None
) -> Any:
    """Keep ``form`` in the problem's forms and, when ``across_calls``, in the cache within its budget
    (in place of the form ``drop``, which it makes redundant)."""
    problem.forms[name] = form
    key = _key(problem)
    if key is None or not across_calls:
        return form
    return keep(key, name, form, drop)


def recall(problem: Problem, name: Hashable) -> Any:
    """What was kept as ``name`` for the problem's mask and sizes, this forward or an earlier call with an
    equal mask (:func:`remember`), else ``None``."""
    return _cached(problem, name)


def remember(problem: Problem, name: Hashable, value: Any) -> Any:
    """Keep ``value`` as ``name`` for the problem's mask and sizes: for this forward, and across calls
    when the mask is keyed by value. ``value`` must not depend on the problem's tensors (a choice worked
    out from the sizes, such as how a split computes its segments); what it holds counts no bytes."""
    return _keep(problem, name, value)


def find(key: Hashable, name: str) -> Any:
    """The form ``name`` kept under ``key`` across calls, else ``None``. ``key`` describes the form's
    inputs by value (:func:`~attnmm.masks._key.value_key`), so an equal key means an equal form."""
    entry = _entries.get(key)
    if entry is None or name not in entry:
        return None
    _entries.move_to_end(key)
    return entry[name]


def keep(key: Hashable, name: Hashable, form: Any, drop: str | None = None) -> Any:
    """Keep ``form`` under ``key`` (a key by value, see :func:`find`) within the budget, in place of
    the form ``drop``; the form must own its tensors (no view of a caller's tensor, which the caller may
    edit). Forms that are not tensors, pairs or patterns count the bytes their ``nbytes`` gives."""
    entry = _entries.setdefault(key, {})
    _entries.move_to_end(key)
    entry[name] = form
    if drop is not None:
        entry.pop(drop, None)
    if _entry_bytes(entry) > _budget:  # too large to keep, whatever else goes
        del _entries[key]
    _evict()
    return form


def pairs(problem: Problem, keep: bool = True) -> Pairs:
    """The mask's allowed pairs for the problem's shapes, built once per forward. They are kept across
    calls (for an equal mask) when ``keep`` and no CSR pattern holds them already; counting the keys of
    each query (:func:`counts`) does not keep them."""
    found = problem._pairs if problem._pairs is not None else _cached(problem, "pairs")
    if found is None:
        held = _cached(problem, "pattern")
        if held is not None:  # the pattern holds the pairs
            found = held.pairs()
        else:
            builds["pairs"] += 1
            mask = problem.effective_mask
            found = mask.pairs(problem.L, problem.S, problem.batch_size, device=problem.q.device)
        keep = keep and held is None
    elif keep:
        key = _key(problem)
        entry = _entries.get(key) if key is not None else None
        keep = entry is None or not ({"pairs", "pattern"} & entry.keys())
    problem._pairs = _keep(problem, "pairs", found, across_calls=keep)
    return found


def pattern(problem: Problem) -> CSRPattern:
    """The CSR pattern of the problem's pairs, shared by the heads (and by the batch items of a mask
    shared by the batch); kept across calls instead of the pairs, which it holds."""
    found = _cached(problem, "pattern")
    if found is None:
        builds["pattern"] += 1
        found = _keep(problem, "pattern", CSRPattern.from_pairs(pairs(problem, keep=False)), drop="pairs")
    return found


def counts(problem: Problem) -> Tensor:
    """|A_b(i)|, the allowed keys of every query (B or 1, L), on the CPU: from the CSR pattern when there is
    one, else from the pairs (which are then not kept across calls for this alone)."""
    found = _cached(problem, "counts")
    if found is None:
        held = _cached(problem, "pattern")
        if held is not None:
            found = held.crow.diff(dim=1).long().cpu()
        else:
            p = pairs(problem, keep=False)
            found = torch.bincount(p.segment().cpu(), minlength=p.num_segments).view(-1, problem.L)
        _keep(problem, "counts", found)
    return found


def dense(problem: Problem) -> Tensor:
    """The mask's dense form (L, S) or (B, L, S) on the inputs' device, shared like the pairs (kept
    across calls up to :data:`DENSE_ELEMENTS` entries)."""
    found = _cached(problem, "dense")
    if found is None:
        builds["dense"] += 1
        mask = problem.effective_mask
        found = mask.dense(problem.L, problem.S, problem.batch_size, device=problem.q.device)
        _keep(problem, "dense", found, across_calls=found.numel() <= DENSE_ELEMENTS)
    return found


def clear() -> None:
    """Forget every cached entry."""
    _entries.clear()
