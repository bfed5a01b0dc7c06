"""Independent checks: a per-query loop implementation of masked attention, and backend comparison."""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm import attend
from attnmm.attention.backends import get_backend, list_backends
from attnmm.attention.forms import Forms
from attnmm.attention.planner import forms_of, split_problem
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks import Full, Mask


def loop_attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, scale: float, score: str, bias: Tensor | None
) -> Tensor:
    """o_i = sum_{j in A(i)} a_ij v_j computed query by query from the sparse pairs (padded layout)."""
    B, H, L, _ = q.shape
    S = k.size(2)
    m = mask if mask is not None else Full()
    pairs = m.pairs(L, S, B if m.batched else None)
    out = torch.zeros(B, H, L, v.size(-1), dtype=q.dtype)
    for p_b in range(B):
        for i in range(L):
            sel = pairs.row == i
            if pairs.batch is not None:
                sel &= pairs.batch == p_b
            idx = sel.nonzero().view(-1)
            if idx.numel() == 0:
                continue
            cols = pairs.col[idx]
            s = (q[p_b, :, i : i + 1] * k[p_b, :, cols]).sum(-1) * scale  # (H, n)
            if bias is not None:
                s = s + bias[idx].T
            a = torch.softmax(s, -1) if score == "softmax" else torch.relu(s) / idx.numel()
            out[p_b, :, i] = (a.unsqueeze(-1) * v[p_b, :, cols]).sum(1)
    return out


def supporting_backends(q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, **kwargs: object) -> list[str]:
    """Registered backends (other than the reference) that accept this problem; FlexAttention, which
    compiles a kernel per mask, has tests of its own (tests/attention/backends/test_flex*.py)."""
    names = []
    for name in list_backends():
        if name in ("reference", "flex"):
            continue
        try:
            attend(q.detach(), k.detach(), v.detach(), mask, backend=name, **kwargs)  # type: ignore[arg-type]
        except ValueError as err:
            if "cannot compute this attention" in str(err):
                continue
            raise
        names.append(name)
    return names


def planned(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, *args: object, **kwargs: object
) -> tuple[Problem, Forms]:
    """The problem of these tensors (the rest as :meth:`Problem.of` takes it) and its mask's forms, split as
    the planner does before asking the backends: ``backend.cost(*planned(...))``."""
    problem = Problem.of(q, k, v, mask, *args, **kwargs)  # type: ignore[arg-type]
    forms = forms_of(problem)
    forms.splits[problem] = split_problem(problem, forms)
    return problem, forms


def grads(out: Tensor, inputs: list[Tensor], seed: int = 0) -> list[Tensor]:
    """Gradients of a random projection of ``out`` (zeros where an input gets none)."""
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    res = torch.autograd.grad(out, inputs, g, allow_unused=True)
    return [torch.zeros_like(x) if r is None else r for x, r in zip(inputs, res)]


__all__ = ["Inputs", "Problem", "get_backend", "grads", "loop_attend", "planned", "supporting_backends"]
