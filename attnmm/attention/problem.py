"""What one :func:`attnmm.attend` call asks, as a value every backend reads, and the tensors it computes on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from attnmm.masks import Full, Mask
from attnmm.masks.base import Structure

_FULL = Full()


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


@dataclass(frozen=True, slots=True)
class Inputs:
    """The tensors of one call in the padded layout: q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev), the
    additive per-pair score bias (P, H) aligned with the mask's pairs (or ``None``), and where a backend
    that can may add its input gradients (:class:`GradSinks`, set for a query segment's problem)."""

    q: Tensor
    k: Tensor
    v: Tensor
    bias: Tensor | None = None
    sinks: GradSinks | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """One attention problem in the padded layout: what a call asks, equal and hashable by value (the mask
    by identity); it holds no tensor. The derived forms of its mask live on the plan
    (:class:`~attnmm.attention.forms.Forms`), the tensors travel beside it (:class:`Inputs`).

    Attributes:
        B, H, L, S, E, Ev (int): batch items, heads, queries, keys, the head dims of q/k and of v.
        dtype (torch.dtype), device (torch.device): the inputs'.
        training (bool): whether a gradient can flow back through this attention.
        mask (Mask, optional): the allowed set; ``None`` means full attention.
        structure (Structure): the mask's :class:`~attnmm.masks.base.Structure` (read once, given by name).
        scale (float): score scale. dropout_p (float): dropout on the weights.
        score (str): ``"softmax"`` or ``"relu"``.
        has_bias (bool): whether an additive per-pair score bias is given.
        return_weights (bool): whether the backend must return the weights at
            :meth:`Forms.weight_pairs <attnmm.attention.forms.Forms.weight_pairs>`.
        packed (bool): whether the caller used the packed (N, H, E) layout (then B = 1).
    """

    B: int
    H: int
    L: int
    S: int
    E: int
    Ev: int
    dtype: torch.dtype
    device: torch.device
    training: bool
    mask: Mask | None
    scale: float
    dropout_p: float = 0.0
    score: Literal["softmax", "relu"] = "softmax"
    has_bias: bool = False
    return_weights: bool = False
    packed: bool = False
    structure: Structure = field(kw_only=True, compare=False, repr=False)

    @classmethod
    def of(
        cls, q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, scale: float, dropout_p: float = 0.0,
        score: Literal["softmax", "relu"] = "softmax", bias: Tensor | None = None, return_weights: bool = False,
        packed: bool = False, structure: Structure | None = None,
    ) -> Problem:
        """The problem of padded tensors q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev) under ``mask`` (its
        ``structure`` read from it when not given)."""
        B, H, L, E = q.shape
        grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias))
        return cls(B, H, L, k.size(2), E, v.size(-1), q.dtype, q.device, grad, mask, scale, dropout_p, score,
                   bias is not None, return_weights, packed,
                   structure=(mask if mask is not None else _FULL).structure if structure is None else structure)

    @property
    def signature(self) -> tuple[Any, ...]:
        """Everything dispatch reads besides the mask."""
        return (self.B, self.H, self.L, self.S, self.E, self.Ev, self.dtype, self.device, self.training,
                self.has_bias, self.dropout_p > 0, self.score, self.return_weights, self.packed)

    @property
    def effective_mask(self) -> Mask:
        """The mask, with ``None`` read as :class:`~attnmm.masks.Full`."""
        return self.mask if self.mask is not None else _FULL

    @property
    def layout(self) -> Literal["padded", "packed"]:
        """``"packed"`` for packed (N, H, E) inputs or a graph mask, else ``"padded"``."""
        return "packed" if self.packed or (self.mask is not None and self.mask.layout == "packed") else "padded"

    @property
    def batch_size(self) -> int | None:
        """B for a batched mask, else ``None`` (the mask's pairs are shared by the batch)."""
        mask = self.mask
        return self.B if mask is not None and mask.batched else None
