"""Backend-vs-reference comparison (values, weights, gradients) and an op-size recorder."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from attnmm import attend
from attnmm.masks import Full, Mask

TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-8),
    torch.float32: dict(atol=3e-5, rtol=1e-4),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
    torch.float16: dict(atol=5e-3, rtol=5e-3),
}


def randn(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def num_pairs(mask: Mask | None, L: int, S: int, B: int) -> int:
    m = mask if mask is not None else Full()
    return m.pairs(L, S, B if m.batched else None).nnz


def run(
    name: str, q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, bias: Tensor | None, seed: int, **kwargs: Any
) -> list[Tensor]:
    """Output, weights and the gradients of q, k, v (and bias) of a random projection of both."""
    inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    if bias is not None:
        inputs.append(bias.detach().clone().requires_grad_(True))
    out, w = attend(*inputs[:3], mask, bias=inputs[3] if bias is not None else None, backend=name,
                    return_weights=True, **kwargs)
    g = torch.Generator().manual_seed(seed + 99)
    go = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    gw = torch.randn(w.values.shape, generator=g, dtype=torch.float64).to(out.dtype)
    loss = (out * go).sum() + (w.values * gw).sum()
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [out, w.values] + [torch.zeros_like(x) if d is None else d for x, d in zip(inputs, grads)]


def compare(
    name: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | None,
    *,
    with_bias: bool = False,
    score: str = "softmax",
    seed: int = 0,
    tol: dict[str, float] | None = None,
) -> list[Tensor]:
    """Assert that backend ``name`` equals the reference in output, weights and every gradient; the
    reference runs in float64 on the same (rounded) inputs."""
    packed = q.dim() == 3
    L, S, H = (q.size(0), k.size(0), q.size(1)) if packed else (q.size(2), k.size(2), q.size(1))
    B = 1 if packed else q.size(0)
    bias = randn(num_pairs(mask, L, S, B), H, dtype=q.dtype, seed=seed + 5) if with_bias else None
    got = run(name, q, k, v, mask, bias, seed, score=score)
    as64 = [t.double() for t in (q, k, v)]
    want = run("reference", *as64, mask, None if bias is None else bias.double(), seed, score=score)
    labels = ["output", "weights", "grad q", "grad k", "grad v", "grad bias"]
    for label, a, b in zip(labels, got, want):
        assert torch.isfinite(a).all(), f"{name}: {label} is not finite"
        torch.testing.assert_close(
            a.double(), b, **(tol or TOL[q.dtype]), msg=lambda m, label=label: f"{name} {label}: {m}"
        )
    return got


class OpSizes(TorchDispatchMode):
    """Records the largest dense tensor any aten op produces while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.largest_op = ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor) and t.layout == torch.strided and t.numel() > self.largest:
                self.largest, self.largest_op = t.numel(), str(func)
        return out
