r"""Full attention within each graph of a packed batch, one graph at a time, without padding.

The global attention of a graph transformer with no other mask (:class:`~attnmm.masks.SameGraph`):
for the nodes of graph :math:`g`, stored contiguously from ``ptr[g]`` to ``ptr[g + 1]``,

.. math::
    \mathbf{O}_g = \mathrm{softmax}\left(\mathbf{Q}_g \mathbf{K}_g^\top \cdot \mathrm{scale}\right) \mathbf{V}_g

with each graph's block computed by fused SDPA. On CPU the forward and the backward call the fused
kernel and its backward directly, graph by graph, writing into one output (and one gradient per input):
one autograd node for the whole batch, no per-graph autograd graph, no padding. Elsewhere (or with
dropout on the weights) each graph goes through ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def graph_sizes(batch: Tensor, num_graphs: int | None = None) -> list[int]:
    """The node count of each graph of a sorted PyG ``batch`` vector (N,), as a list."""
    if batch.numel() == 0:
        return [0] * (num_graphs or 0)
    return torch.bincount(batch, minlength=num_graphs or 0).tolist()


def _block(t: Tensor, start: int, n: int) -> Tensor:
    return t[start : start + n].unsqueeze(0).transpose(1, 2)  # (1, H, n, E)


class _PerGraphFlash(torch.autograd.Function):
    """Fused CPU SDPA per graph: forward and backward by the kernel and its backward, into whole buffers."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, sizes: list[int], scale: float) -> Tensor:
        out = q.new_empty(q.size(0), q.size(1), v.size(-1))  # (N, H, Ev)
        lse: list[Tensor | None] = []
        start = 0
        for n in sizes:
            if n == 0:
                lse.append(None)
                continue
            o, logsumexp = _flash(_block(q, start, n), _block(k, start, n), _block(v, start, n), scale=scale)
            out[start : start + n] = o.squeeze(0).transpose(0, 1)  # (n, H, Ev)
            lse.append(logsumexp)
            start += n
        ctx.save_for_backward(q, k, v, out)
        ctx.lse, ctx.sizes, ctx.scale = lse, sizes, scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        start = 0
        for n, logsumexp in zip(ctx.sizes, ctx.lse):
            if n == 0:
                continue
            grads = _flash_backward(
                _block(d_out, start, n), _block(q, start, n), _block(k, start, n), _block(v, start, n),
                _block(out, start, n), logsumexp, 0.0, False, scale=ctx.scale,
            )
            for whole, g in zip((dq, dk, dv), grads):
                whole[start : start + n] = g.squeeze(0).transpose(0, 1)  # (n, H, E)
            start += n
        ctx.lse = None
        return dq, dk, dv, None, None


def _fused(q: Tensor, dropout_p: float) -> bool:
    """Whether the CPU kernel and its backward are called directly (no dropout, a dtype they take)."""
    return (
        q.device.type == "cpu" and dropout_p == 0.0 and q.dtype in (torch.float32, torch.float64, torch.bfloat16)
        and not torch.is_autocast_enabled("cpu")
    )


def graph_attention(
    q: Tensor, k: Tensor, v: Tensor, sizes: list[int], dropout_p: float = 0.0, scale: float | None = None
) -> Tensor:
    r"""Softmax attention of every node over the nodes of its own graph, on the packed layout.

    Args:
        q (Tensor): queries (N, H, E), the nodes of each graph contiguous (a PyG ``Batch``'s order).
        k (Tensor): keys (N, H, E).
        v (Tensor): values (N, H, Ev).
        sizes (list[int]): the node count of each graph, summing to N (:func:`graph_sizes`).
        dropout_p (float, optional): dropout on the weights (pass 0 at eval time). (default: :obj:`0.0`)
        scale (float, optional): score scale. (default: :math:`1/\sqrt{E}`)

    Shapes:
        - **input:** q (N, H, E), k (N, H, E), v (N, H, Ev)
        - **output:** (N, H, Ev)

    Examples:
        >>> q = k = v = torch.randn(5, 2, 4)  # (N, H, E): a graph of 3 nodes and one of 2
        >>> out = graph_attention(q, k, v, [3, 2])
        >>> ref = F.scaled_dot_product_attention(q[:3].transpose(0, 1), k[:3].transpose(0, 1), v[:3].transpose(0, 1))
        >>> torch.allclose(out[:3], ref.transpose(0, 1), atol=1e-6)
        True
    """
    if sum(sizes) != q.size(0):
        raise ValueError(f"the graph sizes sum to {sum(sizes)} but there are N = {q.size(0)} nodes")
    scale = q.size(-1) ** -0.5 if scale is None else float(scale)
    if _fused(q, dropout_p):
        return _PerGraphFlash.apply(q, k, v, sizes, scale)
    parts = [
        F.scaled_dot_product_attention(a.transpose(0, 1), b.transpose(0, 1), c.transpose(0, 1), dropout_p=dropout_p,
                                       scale=scale).transpose(0, 1)  # (n, H, Ev)
        for a, b, c in zip(q.split(sizes), k.split(sizes), v.split(sizes))
    ]
    return torch.cat(parts) if parts else v.new_zeros(0, v.size(1), v.size(2))


__all__ = ["graph_attention", "graph_sizes"]
