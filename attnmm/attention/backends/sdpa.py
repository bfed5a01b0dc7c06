"""PyTorch's fused scaled-dot-product attention for full and causal masks."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attnmm.attention._problem import Problem
from attnmm.attention.backends.base import Backend


class SDPABackend(Backend):
    """``F.scaled_dot_product_attention`` (flash/memory-efficient kernels on GPU) for no mask,
    :class:`~attnmm.masks.Full` and :class:`~attnmm.masks.Causal`, with softmax scores, no bias and
    no returned weights."""

    name = "sdpa"

    def unsupported(self, problem: Problem) -> str | None:
        kind = problem.effective_mask.structure.kind
        if kind not in ("full", "causal"):
            return f"the mask is {kind}, not full or causal"
        if problem.bias is not None:
            return "a bias is given"
        if problem.score != "softmax":
            return f"score={problem.score!r}"
        if problem.return_weights:
            return "return_weights=True"
        if problem.S == 0:
            return "there are no keys (S = 0)"
        return None

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        causal = problem.effective_mask.structure.kind == "causal"
        out = F.scaled_dot_product_attention(
            problem.q,
            problem.k,
            problem.v,
            dropout_p=problem.dropout_p,
            is_causal=causal,
            scale=problem.scale,
        )
        return out, None
