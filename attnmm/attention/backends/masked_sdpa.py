"""PyTorch's fused scaled-dot-product attention with the mask materialised as a dense bool tensor."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.attention.backends._sizes import dense_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem


class MaskedSDPABackend(Backend):
    r"""``F.scaled_dot_product_attention`` with ``attn_mask = mask.dense(L, S)``, O(L * S) memory.

    The dispatcher picks it for masks that are dense enough (see
    :data:`~attnmm.attention.planner.DENSE_THRESHOLD`) that the fused kernel beats the sparse one.
    It computes softmax scores without bias or returned weights. A query with an empty allowed set
    attends every key inside the kernel and gets its output replaced by the defined zero, which also
    zeroes every gradient through it.

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Causal, Padding
        >>> q = k = v = torch.randn(2, 4, 6, 8)  # (B, H, L, E)
        >>> mask = Causal() & Padding([6, 3])
        >>> out = attend(q, k, v, mask, backend="sdpa_mask")
        >>> torch.allclose(out, attend(q, k, v, mask, backend="reference"), atol=1e-5)
        True
    """

    name = "sdpa_mask"
    supports = Supports(bias=False, relu=False, weights=False, empty=False)
    preference = 30
    materialises = True
    memory_hint = (
        "the fused kernel takes the mask as a dense (B, L, S) tensor; use a sparser mask (the sparse "
        "backend), a band mask (Window, Chunk), or a smaller batch"
    )

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        # the boolean mask and the additive float mask the kernel makes of it
        return dense_bytes(problem, 0, 1 + problem.dtype.itemsize)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...]:
        # multiply-adds of the dense scores and output, the (B or 1, L, S) mask built for them, and the
        # scores (materialised by the unfused kernel PyTorch runs for dropout on CPU)
        scores = problem.B * problem.H * problem.L * problem.S
        products = scores * (problem.E + problem.Ev)
        return float(products), float((problem.batch_size or 1) * problem.L * problem.S), float(scores)

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        allowed = forms.dense(self.store)  # (L, S) or (B, L, S), built once for equal masks
        allowed = allowed.view(-1, 1, problem.L, problem.S)  # (B or 1, 1, L, S)
        nonempty = allowed.any(-1, keepdim=True)  # (B or 1, 1, L, 1)
        some_empty = not bool(nonempty.all())
        if some_empty:  # the fused kernel's output for an empty row is not the defined zero
            allowed = allowed | ~nonempty
        attn_mask: Tensor = allowed
        if problem.dropout_p > 0:  # the unfused kernel of dropout on CPU runs 2-2.5x faster on an additive mask
            attn_mask = inputs.q.new_zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(
            inputs.q, inputs.k, inputs.v, attn_mask=attn_mask, dropout_p=problem.dropout_p, scale=problem.scale
        )
        if some_empty:
            out = torch.where(nonempty, out, out.new_zeros(()))  # zero output, zero gradients
        return out, None
