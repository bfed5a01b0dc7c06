"""PyTorch's fused scaled-dot-product attention for full and causal masks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.attention.backends._sizes import dense_bytes, output_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem


class SDPABackend(Backend):
    """``F.scaled_dot_product_attention`` (flash/memory-efficient kernels on GPU) for no mask,
    :class:`~attnmm.masks.Full` and :class:`~attnmm.masks.Causal`, with softmax scores, no bias and
    no returned weights."""

    name = "sdpa"
    supports = Supports(
        structures=frozenset({"full", "causal"}), bias=False, relu=False, weights=False, empty=False, empty_rows=False
    )
    preference = 10
    memory_hint = (
        "dropout on CPU runs PyTorch's unfused kernel with (B, H, L, S) weights; use dropout_p=0, a "
        "smaller batch, or a Window mask"
    )

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        if problem.dropout_p > 0 and not problem.device.type == "cuda":  # the fused CPU kernel has no dropout
            return dense_bytes(problem, 3 * problem.dtype.itemsize, 0)
        return output_bytes(problem)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...]:
        # multiply-adds of the scores and the output (half of them under a causal mask), the rows read,
        # and the scores (materialised by the unfused kernel PyTorch runs for dropout on CPU)
        width = problem.E + problem.Ev
        scores = problem.B * problem.H * problem.L * problem.S
        if problem.structure.kind == "causal":
            scores //= 2
        return float(scores * width), float(problem.B * problem.H * (problem.L + problem.S) * width), float(scores)

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        causal = problem.structure.kind == "causal"
        q, scale = inputs.q, problem.scale
        if causal and not scale >= torch.finfo(q.dtype).tiny:
            # PyTorch's fused CPU kernel returns NaN for a causal mask with a scale <= 0 (or one that
            # rounds to 0 in q's dtype): it masks with -inf before scaling. Scaling q instead is exact.
            q, scale = q * scale, 1.0
        out = F.scaled_dot_product_attention(
            q, inputs.k, inputs.v, dropout_p=problem.dropout_p, is_causal=causal, scale=scale
        )
        return out, None
