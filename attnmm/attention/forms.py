"""The derived forms of a mask at one problem size (pairs, counts of allowed keys, dense mask, a backend's own
forms such as a CSR pattern), and a bounded store that keeps them across calls, keyed by content.

Every layer of a forward attends under the same mask, and training sees the same masks (a grid, a
window) or masks of the same lengths step after step; enumerating the pairs, sorting them into CSR
form or materialising the dense mask for every call would cost as much as the attention itself for
cheap masks. Two places keep a form, both objects (nothing here is module state):

- :class:`Forms`, the forms of one mask at one size, held by the
  :class:`~attnmm.attention.planner.Plan` of a forward and shared by its layers: each is built at most
  once per plan;
- a :class:`FormStore`, a store across calls owned by whoever makes plans repeatedly (an
  :class:`~attnmm.nn.Encoder`, a graph layer), keyed by the mask's content
  (:func:`~attnmm.masks._key.value_key`: its type, parameters and tensors' values) and the sizes, so
  masks rebuilt per batch by an adapter hit too. A mask holding a tensor the key can only name by
  identity (a large tensor, or one on an accelerator) is never kept across calls: an in-place edit of
  that tensor could otherwise reuse a stale form. A store holds at most ``size`` masks and ``budget``
  bytes (least recently used first out; a form larger than the budget is not kept).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from attnmm.masks import Full, Mask, Pairs, Segments, as_blocks
from attnmm.masks._key import value_key
from attnmm.masks.base import Structure

#: Environment variable giving the default byte budget of a store (and of a plan).
BUDGET_ENV = "ATTNMM_MASK_CACHE_BYTES"

#: Dense masks above this many entries are not kept across calls.
DENSE_ELEMENTS = 1 << 24


def default_budget() -> int:
    """The default byte budget: 64 MiB, or ``$ATTNMM_MASK_CACHE_BYTES``."""
    return int(os.environ.get(BUDGET_ENV, 64 * 2**20))


def nbytes(form: Any) -> int:
    """Bytes held by a form: pairs, or anything with an integer ``nbytes`` (a tensor, a CSR pattern)."""
    if isinstance(form, Pairs):
        return sum(nbytes(t) for t in (form.row, form.col, form.batch) if t is not None)
    found = getattr(form, "nbytes", 0)
    return int(found) if isinstance(found, int) else 0


class FormStore:
    """Forms kept across calls under keys by value, least recently used first out, within a byte budget.

    Args:
        budget (int, optional): bytes it may hold. (default: :func:`default_budget`)
        size (int, optional): most keys it holds. (default: :obj:`16`)
    """

    def __init__(self, budget: int | None = None, size: int = 16) -> None:
        self.budget = default_budget() if budget is None else int(budget)
        if self.budget < 0:
            raise ValueError(f"the budget must be >= 0 bytes, got {self.budget}")
        self.size = size
        self._entries: OrderedDict[Hashable, dict[Hashable, Any]] = OrderedDict()

    def keys(self) -> list[Hashable]:
        """The keys held, least recently used first."""
        return list(self._entries)

    def held_bytes(self) -> int:
        """Bytes held now."""
        return sum(nbytes(form) for entry in self._entries.values() for form in entry.values())

    def set_budget(self, budget: int) -> int:
        """Hold up to ``budget`` bytes from now on (evicting beyond it); returns the previous budget."""
        if budget < 0:
            raise ValueError(f"the budget must be >= 0 bytes, got {budget}")
        previous, self.budget = self.budget, int(budget)
        self._evict()
        return previous

    def find(self, key: Hashable, name: Hashable) -> Any:
        """The form ``name`` kept under ``key``, else ``None``."""
        entry = self._entries.get(key)
        if entry is None or name not in entry:
            return None
        self._entries.move_to_end(key)
        return entry[name]

    def keep(self, key: Hashable, name: Hashable, form: Any, drop: Hashable | None = None) -> Any:
        """Keep ``form`` as ``name`` under ``key`` (a key by value), in place of the form ``drop``; the form
        must own its tensors (no view of a caller's tensor, which the caller may edit)."""
        entry = self._entries.setdefault(key, {})
        self._entries.move_to_end(key)
        entry[name] = form
        if drop is not None:
            entry.pop(drop, None)
        if sum(nbytes(f) for f in entry.values()) > self.budget:  # too large to keep, whatever else goes
            del self._entries[key]
        self._evict()
        return form

    def kept(self, key: Hashable | None, name: Hashable, build: Callable[[], Any]) -> Any:
        """The form ``name`` under ``key``, else ``build()``, kept under it (never for a ``None`` key)."""
        found = None if key is None else self.find(key, name)
        if found is None:
            found = build() if key is None else self.keep(key, name, build())
        return found

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()

    def _evict(self) -> None:
        total = self.held_bytes()
        while self._entries and (total > self.budget or len(self._entries) > self.size):
            _, entry = self._entries.popitem(last=False)
            total -= sum(nbytes(f) for f in entry.values())

    def __repr__(self) -> str:
        return f"FormStore(keys={len(self._entries)}, bytes={self.held_bytes()}, budget={self.budget})"


class Forms:
    """The derived forms of ``mask`` (``None``: full) at one problem size, built once each.

    Args:
        mask (Mask, optional): the allowed set.
        L (int): queries. S (int): keys.
        batch_size (int, optional): B for a batched mask, else ``None``.
        device (torch.device): where the pairs and the dense mask are built.
        packed (bool): whether the problem uses the packed layout.
        store (FormStore, optional): a store across calls to read and keep the forms in (only for a mask
            keyed by value).
    """

    def __init__(
        self, mask: Mask | None, L: int, S: int, batch_size: int | None, device: torch.device,  # noqa: N803
        packed: bool = False, store: FormStore | None = None,
    ) -> None:
        self.mask, self.L, self.S, self.batch_size, self.device, self.packed = mask, L, S, batch_size, device, packed
        self._held: dict[Hashable, Any] = {}
        #: Times each form was built here (not found in these forms or the store), for tests and benchmarks.
        self.built: dict[Hashable, int] = {}
        self._store = store
        #: How each problem under this mask at these sizes is split into query segments (by the planner).
        self.splits: dict[Hashable, Any] = {}

    @cached_property
    def key(self) -> Hashable | None:
        """The mask's content key at these sizes, under which a store keeps its forms (``None``: not keyed by
        value, or no mask)."""
        mask_key = None if self.mask is None else value_key(self.mask)
        return None if mask_key is None else (mask_key, self.L, self.S, self.batch_size, self.packed, str(self.device))

    @property
    def effective_mask(self) -> Mask:
        """The mask, with ``None`` read as :class:`~attnmm.masks.Full`."""
        return self.mask if self.mask is not None else Full()

    @cached_property
    def structure(self) -> Structure:
        """The mask's :class:`~attnmm.masks.base.Structure`."""
        return self.effective_mask.structure

    @cached_property
    def blocks(self) -> Segments | None:
        """The mask as blocks computed one by one (:func:`~attnmm.masks.as_blocks`); ``None`` for one
        block or the packed layout."""
        mask = self.effective_mask
        if self.packed or mask.layout == "packed":
            return None
        return as_blocks(mask, self.L, self.S)

    def get(self, name: Hashable, store: FormStore | None = None) -> Any:
        """The form ``name`` if built (here, or kept in the plan's store, else in ``store``), else ``None``."""
        if name in self._held:
            return self._held[name]
        store = self._store or store
        if store is None or self.key is None:
            return None
        found = store.find(self.key, name)
        if found is not None:
            self._held[name] = found
        return found

    def put(
        self, name: Hashable, form: Any, across_calls: bool = True, drop: Hashable | None = None,
        store: FormStore | None = None,
    ) -> Any:
        """Hold ``form`` as ``name`` and, when ``across_calls``, keep it in the plan's store (else in ``store``)
        in place of ``drop``."""
        self._held[name] = form
        if drop is not None:
            self._held.pop(drop, None)
        store = self._store or store
        if across_calls and store is not None and self.key is not None:
            store.keep(self.key, name, form, drop)
        return form

    def release(self, name: Hashable) -> None:
        """Stop holding the form ``name`` here (the store keeps what it kept)."""
        self._held.pop(name, None)

    def form(
        self, name: Hashable, build: Callable[[Forms], Any], drop: Hashable | None = None,
        store: FormStore | None = None, keep: bool | Callable[[Any], bool] = True,
    ) -> Any:
        """The form ``name``, built by ``build(self)`` the first time (a backend's own form of the mask), kept
        in the plan's store, else in ``store`` (a backend's own), when ``keep`` is true (or true of the form)."""
        found = self.get(name, store)
        if found is None:
            self.built[name] = self.built.get(name, 0) + 1
            found = build(self)
            self.put(name, found, keep(found) if callable(keep) else keep, drop=drop, store=store)
        return found

    def pairs(self, keep: bool = True) -> Pairs:
        """The mask's allowed pairs. Kept across calls when ``keep`` and no CSR pattern holds them already."""
        held = None if self.get("pairs") is not None else self.get("pattern")
        if held is not None:  # the pattern holds the pairs
            return self.put("pairs", held.pairs(), across_calls=False)
        return self.form("pairs", lambda f: f.effective_mask.pairs(f.L, f.S, f.batch_size, device=f.device), keep=keep)

    @property
    def row_counts(self) -> Tensor:
        r"""|A_b(i)| for every query, (B or 1, L), on the CPU: from the intervals of an interval mask in
        O(L), else from the CSR pattern or the pairs."""
        found = self.get("counts")
        if found is not None:
            return found
        L, S, bsz = self.L, self.S, self.batch_size
        items = 1 if bsz is None else bsz  # (an empty batch has 0 items, not 1)
        if L == 0:
            return self.put("counts", torch.zeros(items, 0, dtype=torch.long), across_calls=False)
        if (interval := self.structure.interval) is not None:
            i = torch.arange(L).view(1, -1)
            b = torch.zeros((), dtype=torch.long) if bsz is None else torch.arange(bsz).view(-1, 1)
            start, end = interval(b, i)
            counts = (end.clamp(0, S) - start.clamp(0, S)).clamp_min(0).expand(items, L)
            return self.put("counts", counts, across_calls=False)
        held = self.get("pattern")
        blocks = self.blocks
        if held is not None:
            counts = held.crow.diff(dim=1).long().cpu()
        elif blocks is not None and self.get("pairs") is None:
            counts = self._block_counts(blocks, items)
        else:
            p = self.pairs(keep=False)
            counts = torch.bincount(p.segment().cpu(), minlength=p.num_segments).view(-1, L)
        return self.put("counts", counts)

    @property
    def density(self) -> float:
        """The allowed fraction of the (B x) L x S score matrix."""
        counts = self.row_counts
        total = counts.size(0) * self.L * self.S
        return float(counts.sum()) / total if total else 0.0

    def allowed_pairs(self, B: int) -> int:  # noqa: N803
        """Allowed (query, key) pairs over all B batch items."""
        total = int(self.row_counts.sum())
        return total * B if self.row_counts.size(0) == 1 and self.batch_size is None else total

    @property
    def has_empty_rows(self) -> bool:
        """Whether some query has an empty allowed set (its output and gradient are 0); never for full
        and causal masks with keys."""
        if self.structure.kind in ("full", "causal") and self.S > 0:
            return False
        return bool((self.row_counts == 0).any())

    def weight_pairs(self, B: int) -> Pairs:  # noqa: N803
        """Where returned weights live: the pairs of every batch item (no batch in packed layout)."""
        return self.pairs() if self.packed else self.pairs().expand(B)

    def _block_counts(self, blocks: Segments, items: int) -> Tensor:
        """The counts of a mask made of blocks, query segment by query segment, from each segment's own mask
        (an interval block in O(n)), never holding the pairs of the whole mask."""
        parts = []
        for a, n in enumerate(blocks.sizes):
            linked, row = blocks.row(a)
            if row is None:
                parts.append(torch.zeros(items, n, dtype=torch.long))
                continue
            width = sum(blocks.sizes[c] for c in linked)
            sub = Forms(row, n, width, self.batch_size if row.batched else None, self.device)
            counts = sub.row_counts.expand(items, n)
            if blocks.lengths is not None:  # a segment's padded queries attend nothing
                real = torch.arange(n).view(1, -1) < blocks.lengths[:, a].cpu().view(-1, 1)
                counts = counts * real.expand(items, n)
            parts.append(counts)
        return torch.cat(parts, dim=1) if parts else torch.zeros(items, 0, dtype=torch.long)

    def dense(self, store: FormStore | None = None) -> Tensor:
        """The mask's dense form (L, S) or (B, L, S), kept across calls up to :data:`DENSE_ELEMENTS` entries."""
        return self.form("dense", lambda f: f.effective_mask.dense(f.L, f.S, f.batch_size, device=f.device),
                         store=store, keep=lambda d: d.numel() <= DENSE_ELEMENTS)

    @property
    def nbytes(self) -> int:
        """Bytes of the forms held (for a plan's budget)."""
        return sum(nbytes(form) for form in self._held.values())


__all__ = ["DENSE_ELEMENTS", "FormStore", "Forms", "default_budget", "nbytes"]
