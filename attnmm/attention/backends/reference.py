r"""The reference backend: materialised masked attention, the oracle of every other backend."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.attention.backends._sizes import compute_bytes, dense_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem
from attnmm.attention.weights import AttentionWeights


class ReferenceBackend(Backend):
    r"""Dense masked attention, O(L * S) time and memory, for every mask.

    .. math::
        a_{ij} = \mathbb{1}[j \in A(i)] \, \frac{\exp(s_{ij})}{\sum_{k \in A(i)} \exp(s_{ik})}
        \quad\text{or}\quad a_{ij} = \mathbb{1}[j \in A(i)] \frac{\mathrm{relu}(s_{ij})}{|A(i)|}

    Disallowed scores are filled with the dtype's lowest finite value (not ``-inf``) and the weights
    are multiplied by the mask, so an empty :math:`A(i)` gives zero output and zero gradients.
    """

    name = "reference"
    supports = Supports()  # everything
    preference = 50
    materialises = True
    memory_hint = (
        "the reference backend materialises the (B, H, L, S) scores (it is chosen for dense masks with "
        "ReLU scores or returned weights); use softmax scores without return_weights, a band or sparser "
        "mask, or a smaller batch"
    )

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        # scores, masked scores, weights and their product with the mask, kept for backward
        return dense_bytes(problem, 4 * compute_bytes(problem.dtype), 2)

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...]:
        # multiply-adds of the dense scores and output, and the (B, H, L, S) elementwise passes
        scores = problem.B * problem.H * problem.L * problem.S
        return float(scores * (problem.E + problem.Ev)), float(scores)

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        q, k, v = inputs.q, inputs.k, inputs.v
        B, L, S = problem.B, problem.L, problem.S
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        allowed = forms.dense()  # (L, S) or (B, L, S), built once for equal masks
        allowed = allowed.view(B if allowed.dim() == 3 else 1, 1, L, S)  # (B or 1, 1, L, S)
        scores = torch.matmul(q.to(compute), k.to(compute).transpose(-1, -2)) * problem.scale  # (B, H, L, S)
        if inputs.bias is not None:  # scattered into a dense (B or none, H, L, S) bias, zero elsewhere
            p = forms.pairs()
            scores = scores + AttentionWeights(p.batch, p.row, p.col, inputs.bias.to(compute)).to_dense(L, S, B)
        if problem.score == "softmax":
            scores = scores.masked_fill(~allowed, torch.finfo(compute).min)
            weights = torch.softmax(scores, dim=-1) * allowed
        else:
            count = allowed.sum(-1, keepdim=True).clamp(min=1)
            weights = F.relu(scores) * allowed / count
        if problem.dropout_p > 0:
            weights = F.dropout(weights, p=problem.dropout_p)
        out = torch.matmul(weights, v.to(compute)).to(v.dtype)  # (B, H, L, Ev)
        if not problem.return_weights:
            return out, None
        wp = forms.weight_pairs(problem.B)
        b = wp.batch if wp.batch is not None else torch.zeros_like(wp.row)
        values = weights.permute(0, 2, 3, 1)[b, wp.row, wp.col]  # (P, H)
        return out, values.to(q.dtype)

