"""The planner: what :func:`~attnmm.attend` decides before computing, held by one :class:`Plan`.

The planner sits above the backends: it imports them, they import only the
:class:`~attnmm.attention.problem.Problem` they compute.

Choosing a backend: the cheapest registered backend that supports the problem.

Each backend declares what it computes (:attr:`~attnmm.attention.backends.Backend.supports`); the
dispatcher filters the registry by the declarations and, among the backends left, takes the one with
the lowest estimated cost (:meth:`~attnmm.attention.backends.Backend.cost`: seconds from the
calibrated model of :mod:`attnmm.attention.backends._cost`, for this problem's sizes, number of
allowed pairs, structure, heads, head dims, device and whether it trains). Estimates within
:data:`TIE` of the cheapest count as equal (the model's error is about 20%), and among them the
declared :attr:`~attnmm.attention.backends.Backend.preference` decides; backends without an estimate
rank after those with one. For a problem large enough to be checked against the memory available
(:mod:`attnmm.attention.backends._memory`), the backends whose working memory fits come first; the others
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
from collections import Counter, OrderedDict
from collections.abc import Hashable

import torch

from attnmm.attention.backends import _calibration
from attnmm.attention.backends._memory import SMALL_BYTES, MemoryReader, available_bytes, ceiling_bytes
from attnmm.attention.backends._registry import BACKENDS, get_backend, list_backends
from attnmm.attention.backends._split import Keys, Row, Split, sub_problem
from attnmm.attention.backends.base import Backend
from attnmm.attention.forms import Forms, FormStore, default_budget
from attnmm.attention.problem import Problem
from attnmm.masks import Mask
from attnmm.masks._key import value_key

#: Density from which masked dense SDPA beats the sparse backend on a device without calibrated
#: costs: the crossover measured by ``python -m benchmarks.density`` (forward + backward, fp32, 2 CPU
#: threads, L = S = 2048, H = 4, E = 64) lay between 0.22 and 0.29 in repeated runs.
DENSE_THRESHOLD: float = 0.25

#: Relative margin within which two cost estimates count as equal.
TIE: float = 0.1

#: Rank added to a materialising backend when the mask is sparser than :data:`DENSE_THRESHOLD`.
_SPARSE_PENALTY = 1000


def _by_preference(problem: Problem, forms: Forms, usable: list[Backend]) -> list[Backend]:
    kind = problem.structure.kind
    dense = kind in ("full", "causal")
    if not dense and any(b.materialises for b in usable):
        dense = problem.layout == "padded" and forms.density >= DENSE_THRESHOLD
    return sorted(usable, key=lambda b: b.preference + (_SPARSE_PENALTY if b.materialises and not dense else 0))


def candidates(problem: Problem, forms: Forms | None = None, reader: MemoryReader | None = None) -> list[Backend]:
    """The registered backends that support ``problem`` (its mask's ``forms``, made when not given), best
    first."""
    return _candidates(problem, forms or forms_of(problem), reader)[0]


def forms_of(problem: Problem) -> Forms:
    """New derived forms of ``problem``'s mask at its sizes (those of a call are held by its :class:`Plan`)."""
    return Forms(problem.mask, problem.L, problem.S, problem.batch_size, problem.device, problem.packed)


def _candidates(problem: Problem, forms: Forms, reader: MemoryReader | None = None) -> tuple[list[Backend], bool]:
    """:func:`candidates`, and whether their order followed the memory free now (which may change). A
    problem whose mask is made of blocks is split first (:func:`split_problem`), when it was not yet."""
    if problem not in forms.splits:
        forms.splits[problem] = split_problem(problem, forms)
    if problem.B == 0 or problem.H == 0:
        # an empty batch: nothing to compute, and the reference takes any shape
        return [get_backend("reference")], False
    usable = [b for b in map(get_backend, list_backends()) if b.unsupported(problem, forms) is None]
    if problem.device.type not in _calibration.COSTS:
        return _by_preference(problem, forms, usable), False
    if ceiling_bytes(problem) >= SMALL_BYTES:  # a large problem: what fits in memory comes first
        needs = {b.name: b.memory_bytes(problem, forms) for b in usable}
        available = available_bytes(problem.device, reader) if max(needs.values()) >= SMALL_BYTES else None
        if available is not None:
            fitting = [b for b in usable if needs[b.name] <= available]
            too_big = [b for b in usable if needs[b.name] > available]
            return _by_cost(problem, forms, fitting) + _by_preference(problem, forms, too_big), bool(too_big)
    return _by_cost(problem, forms, usable), False


def _by_cost(problem: Problem, forms: Forms, usable: list[Backend]) -> list[Backend]:
    if not usable:
        return []
    costs = {b.name: b.cost(problem, forms) for b in usable}
    ranked = sorted(usable, key=lambda b: (math.inf if costs[b.name] is None else costs[b.name], b.preference))
    best = costs[ranked[0].name]
    if best is None:
        return ranked
    tied = [b for b in ranked if (cost := costs[b.name]) is not None and cost <= best * (1 + TIE)]
    tied.sort(key=lambda b: b.preference)
    return tied + [b for b in ranked if b not in tied]


def split_problem(problem: Problem, forms: Forms, plan: Plan | None = None) -> Split | None:
    """The split of ``problem`` (its mask's ``forms``) into its query segments, each dispatched on its own;
    ``None`` when its mask is not made of blocks (:attr:`Forms.blocks <attnmm.attention.forms.Forms.blocks>`).

    A segment linked to one key segment, or to all, reads the keys as they are. A segment linked to
    several is a choice: their keys laid one after another (a copy, which keeps a dense or banded
    block's cost to its own keys) or all the keys in their own places, the blocks of unlinked segments
    empty (no copy, and as cheap for kernels whose cost follows the allowed pairs); the keys stay in
    place unless laying them together is estimated cheaper.

    What dispatch chose for each segment (how it reads its keys, the backend and its estimate) depends
    on the mask and the sizes only, so it is kept beside the mask's other forms
    (:class:`~attnmm.attention.forms.Forms`): a later call with an equal mask and the same sizes,
    dtype, device and options takes it instead of asking every backend again (the segments' masks
    are made anew from the call's own mask), as long as the same backends are registered and can
    run and the cost constants are the same. A choice that followed the memory free at the time (a
    backend passed over because it did not fit) is not kept.
    """
    blocks = forms.blocks
    if blocks is None:
        return None
    # (the choice also depends on which backends are registered and can run, and on the cost constants)
    usable = tuple(n for n in list_backends() if get_backend(n).available() is None)
    name = ("split", problem.signature, BACKENDS.generation, usable, id(_calibration.COSTS))
    store = get_backend("segments").store if "segments" in BACKENDS else None  # (kept by the backend running splits)
    chosen: tuple[tuple[Keys, str, float | None] | None, ...] | None = forms.get(name, store)
    reader = plan.reader if plan is not None else None
    rows: list[Row | None] = []
    transient = False
    for a in range(blocks.num_segments):
        linked, row_mask = blocks.row(a)
        if row_mask is None or blocks.sizes[a] == 0:
            rows.append(None)
            continue
        n = blocks.sizes[a]
        if len(linked) == blocks.num_segments:  # every segment, in order: the keys themselves
            row_forms: list[tuple[Keys, Mask, int]] = [("all", row_mask, problem.S)]
        elif len(linked) == 1:
            row_forms = [("one", row_mask, blocks.sizes[linked[0]])]
        else:
            over_all = blocks.row_over_all(a)
            assert over_all is not None
            row_forms = [("together", row_mask, sum(blocks.sizes[c] for c in linked)), ("all", over_all, problem.S)]
        taken = None if chosen is None else chosen[a]
        if taken is not None:
            keys, backend, cost = taken
            mask, width = next((m, w) for form, m, w in row_forms if form == keys)
            sub, sub_forms = _planned(problem, n, width, mask, plan)
            rows.append(Row(a, keys, tuple(linked), mask, get_backend(backend), cost, sub_forms))
            continue
        options = []
        for keys, mask, width in row_forms:
            sub, sub_forms = _planned(problem, n, width, mask, plan)
            found, bound = _candidates(sub, sub_forms, reader)
            transient = transient or bound
            options.append(Row(a, keys, tuple(linked), mask, found[0], found[0].cost(sub, sub_forms), sub_forms))
        # of a segment's two forms, its keys in place unless laying them together is estimated cheaper (or a
        # cost is unknown)
        together, in_place = options[0], options[-1]
        known = together.cost is not None and in_place.cost is not None
        best = in_place if known and together.cost >= in_place.cost * (1 - 1e-6) else together  # type: ignore[operator]
        for option in options:  # the pairs counted for the estimates: built again if the backend needs them
            option.forms.release("pairs")
        rows.append(best)
    if chosen is None and not transient:
        kept = tuple(None if r is None else (r.keys, r.backend.name, r.cost) for r in rows)
        forms.put(name, kept, store=store)
    return Split(blocks, tuple(rows))


def _planned(problem: Problem, rows: int, keys: int, mask: Mask, plan: Plan | None) -> tuple[Problem, Forms]:
    """A query segment's problem and its forms (from ``plan``), itself split when made of blocks."""
    sub = sub_problem(problem, rows, keys, mask)
    forms = forms_of(sub) if plan is None else plan.forms(mask, rows, keys, sub.batch_size, sub.device, False)
    forms.splits[sub] = split_problem(sub, forms, plan)
    return sub, forms


def choose_backend(
    problem: Problem, forms: Forms | None = None, name: str = "auto", reader: MemoryReader | None = None
) -> Backend:
    """The backend for ``problem`` (its mask's ``forms``, made when not given): ``name``, or for ``"auto"``
    the first of :func:`candidates`."""
    forms = forms or forms_of(problem)
    if name != "auto":
        backend = get_backend(name)
        reason = backend.unsupported(problem, forms)
        if reason is not None:
            raise ValueError(f"backend {name!r} cannot compute this attention: {reason}; use backend='auto'")
        return backend
    found, _ = _candidates(problem, forms, reader)
    assert found, "the reference backend supports every problem"
    return found[0]


class Plan:
    r"""Everything :func:`~attnmm.attend` derives for a mask, made once and passed where a mask is taken.

    A plan holds, for each distinct problem it has seen (the mask, the sizes (B, H, L, S, E, Ev), the
    dtype and device, whether a gradient flows, a bias, dropout, the score and whether weights are
    returned), the backend chosen and, for a mask made of blocks, how each query segment is computed;
    and for each mask at each size its derived forms (:class:`~attnmm.attention.forms.Forms`: pairs,
    counts, dense mask, CSR pattern), shared by equal masks. The first call makes an entry; later equal
    calls take it. What it holds is bounded by ``budget`` bytes (the least recently used forms go first).

    Build one for a mask and pass it in the mask's place, ``attend(q, k, v, plan)``, as FlexAttention takes
    a ``BlockMask`` built once; an :class:`~attnmm.nn.Encoder` makes one per forward and passes it to
    every layer. A plain ``attend(q, k, v, mask)`` makes its own. ``store`` (a
    :class:`~attnmm.attention.forms.FormStore` owned by whoever makes plans repeatedly) keeps the forms
    of masks keyed by value across plans.

    Args:
        mask (Mask, optional): the mask the plan stands for when passed in a mask's place.
            (default: :obj:`None`, full attention, or the ``mask`` given beside ``plan=``)
        store (FormStore, optional): forms kept across plans. (default: :obj:`None`)
        budget (int, optional): bytes of forms the plan may hold. (default: 64 MiB, or
            ``$ATTNMM_MASK_CACHE_BYTES``)

    Attributes:
        made (int): problems planned. reused (int): calls that took an earlier problem's plan.

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.attention import Plan
        >>> from attnmm.masks import Window
        >>> plan = Plan(Window(2, 0))
        >>> q = torch.randn(1, 2, 16, 8)  # (B, H, L, E)
        >>> for _ in range(3):  # three layers
        ...     q = attend(q, q, q, plan)
        >>> plan.made, plan.reused
        (1, 2)
    """

    def __init__(self, mask: Mask | None = None, *, store: FormStore | None = None, budget: int | None = None) -> None:
        if mask is not None and not isinstance(mask, Mask):
            raise TypeError(f"a Plan is made for an attnmm.masks.Mask or None, got {type(mask).__name__}")
        self.mask = mask
        self.store = store
        self.budget = default_budget() if budget is None else int(budget)
        #: Reads the memory available once per :data:`~attnmm.attention.backends._memory.READING_SECONDS`.
        self.reader = MemoryReader()
        self._entries: OrderedDict[Hashable, tuple[Backend, Split | None]] = OrderedDict()  # the backend, the split
        self._forms: OrderedDict[Hashable, Forms] = OrderedDict()
        self._held: dict[int, Mask] = {}  # masks named by identity: held, so their ids stay unique
        self.made = self.reused = 0

    def forms(
        self, mask: Mask | None, L: int, S: int, batch_size: int | None, device: torch.device,  # noqa: N803
        packed: bool = False,
    ) -> Forms:
        """The derived forms of ``mask`` at these sizes: shared by every call of the plan with an equal mask
        (by value, else the same object)."""
        mask_key = None if mask is None else value_key(mask)
        if mask_key is None and mask is not None:
            self._held[id(mask)] = mask
        name = ("value", mask_key) if mask_key is not None or mask is None else ("id", id(mask))
        key = (name, L, S, batch_size, packed, str(device))
        found = self._forms.get(key)
        if found is None:
            while self._forms and self.nbytes > self.budget:  # the least recently used forms go first
                self._forms.popitem(last=False)
            found = self._forms[key] = Forms(mask, L, S, batch_size, device, packed, self.store)
            found.key = None if mask_key is None else (mask_key, L, S, batch_size, packed, str(device))  # (read once)
        else:
            self._forms.move_to_end(key)
        return found

    def take(self, problem: Problem, forms: Forms) -> Backend | None:
        """The backend chosen for an equal problem earlier (its split given to ``forms``); ``None`` when this
        is the first such problem."""
        if problem not in self._entries:
            return None
        backend, split = self._entries[problem]
        forms.splits.setdefault(problem, split)
        self.reused += 1
        return backend

    def keep(self, problem: Problem, forms: Forms, backend: Backend) -> None:
        """Remember ``backend`` and the split of ``problem`` (in ``forms``), within the budget."""
        self._entries[problem] = (backend, forms.splits.get(problem))
        self.made += 1

    @property
    def nbytes(self) -> int:
        """Bytes of the forms the plan holds."""
        return sum(forms.nbytes for forms in self._forms.values())

    @property
    def built(self) -> dict[Hashable, int]:
        """How many times each form was built for the forms the plan holds (for tests and benchmarks)."""
        return dict(sum((Counter(forms.built) for forms in self._forms.values()), Counter()))

    def __repr__(self) -> str:
        return f"Plan(mask={self.mask!r}, problems={len(self._entries)}, made={self.made}, reused={self.reused})"


#: The name the plan had before it was taken into the planner.
AttentionPlan = Plan


__all__ = [
    "DENSE_THRESHOLD", "TIE", "AttentionPlan", "Plan", "candidates", "choose_backend", "forms_of", "split_problem"
]
