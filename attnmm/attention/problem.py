"""The validated inputs of one :func:`attnmm.attend` call, as every backend sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from attnmm.attention.forms import Forms
from attnmm.masks import Mask, Pairs, Segments
from attnmm.masks.base import Structure


@dataclass
class GradSinks:
    """Buffers a backend may add the gradients of its queries, keys and values into during its backward
    pass, rather than returning them (a backend that can says so: :attr:`Backend.accumulates
    <attnmm.attention.backends.base.Backend.accumulates>`). The caller sets them before that backward
    runs; each is ``None`` (return the gradient) or a (B, H, n, E) tensor of the input's shape and
    dtype, usually a view of a larger buffer (a query segment's rows of the whole sequence's gradient).
    A backend that adds into a sink returns ``None`` for that input; one that cannot returns the
    gradient as usual, so a caller handles both."""

    q: Tensor | None = None
    k: Tensor | None = None
    v: Tensor | None = None

    def clear(self) -> None:
        """Let go of the buffers."""
        self.q = self.k = self.v = None


@dataclass
class Problem:
    """One attention problem in the padded layout.

    Attributes:
        q (Tensor): queries (B, H, L, E).
        k (Tensor): keys (B, H, S, E).
        v (Tensor): values (B, H, S, Ev).
        mask (Mask, optional): the allowed set; ``None`` means full attention.
        scale (float): score scale.
        dropout_p (float): dropout probability on the attention weights.
        score (str): ``"softmax"`` or ``"relu"``.
        bias (Tensor, optional): additive score bias per allowed pair, (P, H), aligned with
            :meth:`pairs`.
        return_weights (bool): whether the backend must return the weights at :meth:`weight_pairs`.
        packed (bool): whether the caller used the packed (N, H, E) layout (then B = 1).
        forms (Forms): the mask's derived forms at this problem's sizes (pairs, counts, dense mask, a
            backend's CSR pattern), built once each and shared by the calls of one
            :class:`~attnmm.attention.Plan` (made here when not given).
        split (Split, optional): for a mask made of blocks, how its query segments are computed, worked
            out by the planner (:func:`~attnmm.attention.planner.split_problem`); else ``None``.
        sinks (GradSinks, optional): where a backend that can may add its input gradients (set by
            :class:`~attnmm.attention.backends._split.SplitAttention` for a query segment's problem).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    mask: Mask | None
    scale: float
    dropout_p: float
    score: Literal["softmax", "relu"]
    bias: Tensor | None
    return_weights: bool
    packed: bool
    forms: Forms = field(default=None, repr=False)  # type: ignore[assignment]  # (made in __post_init__)
    split: Any = field(default=None, repr=False)
    sinks: GradSinks | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.forms is None:
            self.forms = Forms(self.mask, self.L, self.S, self.batch_size, self.q.device, self.packed)

    @property
    def B(self) -> int:  # noqa: N802 - the house letter set
        return self.q.size(0)

    @property
    def H(self) -> int:  # noqa: N802
        return self.q.size(1)

    @property
    def L(self) -> int:  # noqa: N802
        return self.q.size(2)

    @property
    def S(self) -> int:  # noqa: N802
        return self.k.size(2)

    @property
    def signature(self) -> tuple[Any, ...]:
        """Everything dispatch reads besides the mask: the sizes (B, H, L, S, E, Ev), the dtype and device,
        whether a gradient flows, a bias, dropout, the score, whether weights are returned, the layout."""
        q, v = self.q, self.v
        return (
            self.B, self.H, self.L, self.S, q.size(-1), v.size(-1), q.dtype, q.device, self.training,
            self.bias is not None, self.dropout_p > 0, self.score, self.return_weights, self.packed,
        )

    @property
    def effective_mask(self) -> Mask:
        """The mask, with ``None`` read as :class:`~attnmm.masks.Full`."""
        return self.forms.effective_mask

    @property
    def blocks(self) -> Segments | None:
        """The mask as blocks computed one by one (:func:`~attnmm.masks.as_blocks`: a ``Segments``
        mask, packed documents); ``None`` for one block or the packed layout."""
        return self.forms.blocks

    @property
    def structure(self) -> Structure:
        """The mask's :class:`~attnmm.masks.base.Structure`."""
        return self.forms.structure

    @property
    def training(self) -> bool:
        """Whether a gradient can flow back through this attention (forward and backward will run)."""
        if not torch.is_grad_enabled():
            return False
        return any(t is not None and t.requires_grad for t in (self.q, self.k, self.v, self.bias))

    @property
    def layout(self) -> Literal["padded", "packed"]:
        """``"packed"`` for packed (N, H, E) inputs or a graph mask, else ``"padded"``."""
        return "packed" if self.packed or (self.mask is not None and self.mask.layout == "packed") else "padded"

    @property
    def batch_size(self) -> int | None:
        """B for a batched mask, else ``None`` (the mask's pairs are shared by the batch)."""
        mask = self.mask
        return self.B if mask is not None and mask.batched else None

    def pairs(self) -> Pairs:
        """The mask's allowed pairs (built once per plan: :class:`~attnmm.attention.forms.Forms`)."""
        return self.forms.pairs()

    @property
    def row_counts(self) -> Tensor:
        r"""|A_b(i)| for every query, (B or 1, L), on the CPU."""
        return self.forms.row_counts

    @property
    def density(self) -> float:
        """The allowed fraction of the (B x) L x S score matrix."""
        counts = self.row_counts
        total = counts.size(0) * self.L * self.S
        return float(counts.sum()) / total if total else 0.0

    @property
    def allowed_pairs(self) -> int:
        """Allowed (query, key) pairs over all B batch items."""
        counts = self.row_counts
        total = int(counts.sum())
        return total * self.B if counts.size(0) == 1 and self.batch_size is None else total

    @property
    def has_empty_rows(self) -> bool:
        """Whether some query has an empty allowed set (its output and gradient are 0); never for full
        and causal masks with keys."""
        if self.structure.kind in ("full", "causal") and self.S > 0:
            return False
        return bool((self.row_counts == 0).any())

    def weight_pairs(self) -> Pairs:
        """Where returned weights live: the pairs of every batch item (no batch in packed layout)."""
        return self.pairs() if self.packed else self.pairs().expand(self.B)
