"""The backend interface of the attention core: what a backend declares it supports, and how it computes."""

from __future__ import annotations

import inspect
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, get_args

import torch
from torch import Tensor

from attnmm.attention.backends._cost import constants, estimate, mode
from attnmm.attention.forms import Forms, FormStore
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks.base import StructureKind

#: Every mask structure (:attr:`Structure.kind <attnmm.masks.base.Structure>`).
STRUCTURES: frozenset[str] = frozenset(get_args(StructureKind))

#: Both layouts: ``"padded"`` (B, H, L, E) and ``"packed"`` (PyG's (N, H, E) nodes, or a graph mask).
LAYOUTS: frozenset[str] = frozenset({"padded", "packed"})


@dataclass(frozen=True)
class Supports:
    """What a backend computes, declared once on its class and read by
    :meth:`~attnmm.attention.backends.Backend.unsupported`, by the dispatcher and by the tests (which
    draw only the problems a backend declares).

    Args:
        structures (frozenset[str], optional): the mask structures it handles, among ``"full"``,
            ``"causal"``, ``"band"``, ``"interval"`` and ``"sparse"``. (default: all)
        layouts (frozenset[str], optional): ``"padded"`` and/or ``"packed"`` (the packed (N, H, E)
            inputs of graphs, or a graph mask). (default: both)
        bias (bool, optional): an additive per-pair score bias. (default: :obj:`True`)
        relu (bool, optional): ``score="relu"``. (default: :obj:`True`)
        weights (bool, optional): ``return_weights=True``. (default: :obj:`True`)
        dropout (bool, optional): ``dropout_p > 0``. (default: :obj:`True`)
        empty (bool, optional): problems without queries or keys (L = 0 or S = 0). (default: :obj:`True`)
        empty_rows (bool, optional): queries whose allowed set is empty (which get output 0).
            (default: :obj:`True`)
        devices (frozenset[str], optional): the device types it runs on; ``None`` for any.
            (default: :obj:`None`)
        dtypes (frozenset[torch.dtype], optional): the input dtypes it takes; ``None`` for any
            floating-point dtype. (default: :obj:`None`)
    """

    structures: frozenset[str] = STRUCTURES
    layouts: frozenset[str] = LAYOUTS
    bias: bool = True
    relu: bool = True
    weights: bool = True
    dropout: bool = True
    empty: bool = True
    empty_rows: bool = True
    devices: frozenset[str] | None = None
    dtypes: frozenset[torch.dtype] | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.structures <= STRUCTURES:
            raise ValueError(f"unknown structures {sorted(self.structures - STRUCTURES)}; valid: {sorted(STRUCTURES)}")
        if not self.layouts <= LAYOUTS:
            raise ValueError(f"unknown layouts {sorted(self.layouts - LAYOUTS)}; valid: {sorted(LAYOUTS)}")

    def refuses(self, problem: Problem, forms: Forms) -> str | None:
        """``None`` when ``problem`` (its mask's ``forms``) is within these declarations, else the first one it
        violates."""
        kind = problem.structure.kind
        if kind not in self.structures:
            return f"the mask is {kind}, not {' or '.join(k for k in get_args(StructureKind) if k in self.structures)}"
        if problem.layout not in self.layouts:
            return f"the {problem.layout} layout (graph masks or (N, H, E) inputs) is not supported"
        device = problem.device.type
        if self.devices is not None and device not in self.devices:
            return f"the inputs are on {device}, not {' or '.join(sorted(self.devices))}"
        if self.dtypes is not None and problem.dtype not in self.dtypes:
            names = ", ".join(sorted(str(d).removeprefix("torch.") for d in self.dtypes))
            return f"dtype {problem.dtype} (it takes {names})"
        if not self.bias and problem.has_bias:
            return "a bias is given"
        if not self.relu and problem.score != "softmax":
            return f"score={problem.score!r}"
        if not self.weights and problem.return_weights:
            return "return_weights=True"
        if not self.dropout and problem.dropout_p > 0:
            return "dropout_p > 0"
        if not self.empty and (problem.L == 0 or problem.S == 0):
            return f"there are no queries or keys (L = {problem.L}, S = {problem.S})"
        if not self.empty_rows and forms.has_empty_rows:
            return "some query has an empty allowed set"
        return None


class BackendRefusedError(RuntimeError):
    """Raised by a backend's ``forward`` that finds, only as it runs, that it cannot compute the problem (and
    refuses it by its ``check`` from then on). Dispatch (``backend="auto"``) then chooses again; a backend
    named by the caller lets it through."""


class Backend(ABC):
    """One way to compute :func:`attnmm.attend`.

    A backend declares what it computes (:attr:`supports`), its work on a problem for the cost model
    (:meth:`cost_terms`) and its :attr:`preference`, computes a problem on its tensors
    (:meth:`forward`), returning the output (B, H, L, Ev) and, when ``problem.return_weights``, the
    weights (P, H) at ``forms.weight_pairs(problem.B)``, and estimates its
    working memory (:meth:`memory_bytes`). :meth:`unsupported` derives its reasons from the
    declarations; a backend adds machine-wide conditions in :meth:`available` and problem-specific ones
    in :meth:`check`. Every backend must equal
    :class:`~attnmm.attention.backends.reference.ReferenceBackend` in values and gradients; the tests
    check each registered backend on the problems it declares.
    """

    name: str = ""

    #: What this backend computes.
    supports: Supports = Supports()

    #: Order among the backends that support a problem (lower first) where costs are not
    #: estimated (no calibration for the device), and among equal estimates.
    preference: int = 100

    #: Whether its work is O(L * S) whatever the mask (it materialises the dense mask or scores): on a
    #: device without calibrated costs, such a backend ranks after the O(nnz) ones for sparse masks.
    materialises: bool = False

    #: Whether its backward adds input gradients into the call's :attr:`Inputs.sinks
    #: <attnmm.attention.problem.Inputs.sinks>` when they are set (else it returns them).
    accumulates: bool = False

    #: What to change when :meth:`memory_bytes` exceeds the memory available.
    memory_hint: str = "use a sparser mask (fewer allowed pairs), a smaller batch, or fewer heads"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A backend written for the older one-argument form (``check(problem)``, ``forward(problem)`` reading
        ``problem.q``, ``problem.pairs()``...) is adapted, with a warning that names the new form."""
        super().__init_subclass__(**kwargs)
        for name in ("check", "cost_terms", "memory_bytes", "forward"):
            method = cls.__dict__.get(name)
            if method is not None and len(inspect.signature(method).parameters) == 2:
                warnings.warn(f"{cls.__name__}.{name}(problem) is the older backend form; take (problem, forms) and "
                              "in forward also inputs (see docs/attention.md)", FutureWarning, stacklevel=3)
                setattr(cls, name, lambda self, p, f, i=None, _m=method: _m(self, _OneArgument(p, f, i)))

    @cached_property
    def store(self) -> FormStore:
        """What this backend derived from masks (a CSR pattern, a dense mask, its choices), kept across calls
        by the masks' content within a byte budget: a plain ``attend(q, k, v, mask)`` called again with an
        equal mask finds it here (a plan's own store, when it has one, comes first)."""
        return FormStore()

    def available(self) -> str | None:
        """``None`` if this backend can run on this machine, else why not (e.g. a missing compiler)."""
        return None

    def check(self, problem: Problem, forms: Forms) -> str | None:
        """A problem-specific refusal beyond :attr:`supports` (``None``: no objection); ``forms`` are the
        derived forms of its mask at its sizes (pairs, counts, structure, split), held by the plan."""
        return None

    def unsupported(self, problem: Problem, forms: Forms) -> str | None:
        """``None`` if this backend computes ``problem``, else the reason it does not: from
        :meth:`available`, then the declarations in :attr:`supports`, then :meth:`check`."""
        return self.available() or self.supports.refuses(problem, forms) or self.check(problem, forms)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...] | None:
        """The work this backend does on ``problem``, as the terms :math:`x_k` of the cost model
        :math:`t = c_0 + \\sum_k c_k x_k` (see :mod:`~attnmm.attention.backends._cost`); ``None``
        (the default) for no estimate."""
        return None

    def cost(self, problem: Problem, forms: Forms) -> float | None:
        """Estimated seconds for ``problem`` from the calibrated cost model, or ``None`` when this
        backend has no terms or no constants for the device and mode."""
        if constants(self.name, problem.device.type, mode(problem)) is None:
            return None  # no constants: the terms are not worked out
        terms = self.cost_terms(problem, forms)
        return None if terms is None else estimate(self.name, problem, terms)

    @abstractmethod
    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        """Output (B, H, L, Ev) and weights (P, H) or ``None``, of ``problem`` on the tensors ``inputs``."""

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        """Estimated bytes this backend allocates for ``problem`` (working memory and the output),
        checked by :func:`~attnmm.attend` against the memory available before anything is computed
        (:mod:`attnmm.attention.backends._memory`). Problems whose
        :func:`~attnmm.attention.backends._memory.ceiling_bytes` (1 KiB per score) is small are not asked.
        The default, 0, claims nothing: override it with the backend's own working memory.
        """
        return 0


class _OneArgument:
    """A call as the older backend form read it: the tensors, the problem's fields and the mask's forms as one."""

    def __init__(self, problem: Problem, forms: Forms, inputs: Inputs | None) -> None:
        self._parts = (inputs, problem, forms)

    def weight_pairs(self) -> Any:
        return self._parts[2].weight_pairs(self._parts[1].B)  # type: ignore[union-attr]

    def __getattr__(self, name: str) -> Any:
        for part in self._parts:
            if part is not None and hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(name)
