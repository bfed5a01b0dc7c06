r"""Full attention within each graph of a packed batch, one graph at a time, without padding.

The global attention of a graph transformer with no other mask (:class:`~attnmm.masks.SameGraph`):
for the nodes of graph :math:`g`, stored contiguously from ``ptr[g]`` to ``ptr[g + 1]``,

.. math::
    [\mathbf{Q}, \mathbf{K}, \mathbf{V}] = \mathbf{X} \mathbf{W}^\top + \mathbf{b}, \qquad
    \mathbf{O}_g = \mathrm{softmax}\left(\mathbf{Q}_g \mathbf{K}_g^\top \cdot \mathrm{scale}\right) \mathbf{V}_g

with each graph's block computed by fused SDPA. On CPU the forward and the backward call the fused
kernel and its backward directly, graph by graph, writing into one output (and the input's gradient):
one autograd node for the projection and the whole batch, no per-graph autograd graph, no padding.
It keeps X (which the caller holds anyway), O and one log-sum-exp per graph, not Q, K and V: the
backward recomputes them. Both passes take the graphs in groups of at most ``GROUP_ROWS`` nodes (whole
graphs; a larger graph alone), so Q, K, V and their gradients exist for one group at a time, not for the
whole batch, and stay in cache while the group's graphs use them.
Elsewhere (or with dropout on the weights) each graph goes through ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.masks import Mask

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def graph_sizes(batch: Tensor, num_graphs: int | None = None) -> list[int]:
    """The node count of each graph of a sorted PyG ``batch`` vector (N,), as a list."""
    return torch.bincount(batch, minlength=num_graphs or 0).tolist()


def within_graph_sizes(mask: Mask, n: int) -> list[int] | None:
    """The sizes of the contiguous blocks when ``mask`` over ``n`` packed nodes allows each node exactly the
    nodes of its own block (as :class:`~attnmm.masks.SameGraph` does), else ``None``. Asked of the mask (its
    padded form and that form's key range per query), never of its class."""
    padded = mask.structure.padded
    interval = None if padded is None or padded.batched else padded.structure.interval
    if interval is None:
        return None
    rows = torch.arange(n)
    start, end = interval(torch.zeros_like(rows), rows)  # (N,) each
    start, end = start.clamp(0, n), end.clamp(0, n)
    first = rows[start == rows]  # the first node of each block
    if n == 0 or first.numel() == 0 or int(first[0]) != 0:
        return [] if n == 0 else None
    sizes = torch.diff(first, append=first.new_tensor([n]))
    last = first + sizes
    same = torch.equal(start, first.repeat_interleave(sizes)) and torch.equal(end, last.repeat_interleave(sizes))
    return sizes.tolist() if same else None


def _block(t: Tensor, start: int, n: int) -> Tensor:
    return t[start : start + n].unsqueeze(0).transpose(1, 2)  # (1, H, n, E)


#: the nodes of a group of graphs whose queries, keys and values (and their gradients) exist at once
GROUP_ROWS = 512


def _groups(sizes: list[int], rows: int | None = None) -> list[tuple[int, list[int]]]:
    """Consecutive graphs in groups of at most ``rows`` nodes (``GROUP_ROWS``; a larger graph alone): (first
    node, sizes) each."""
    rows = GROUP_ROWS if rows is None else rows
    groups: list[tuple[int, list[int]]] = []
    start = total = 0
    for n in sizes:
        if groups and total + n <= rows:
            groups[-1][1].append(n)
            total += n
        else:
            groups.append((start, [n]))
            total = n
        start += n
    return groups


class _ProjectedWithinGraphs(torch.autograd.Function):
    """The projection and fused CPU SDPA per graph, a group of graphs at a time, forward and backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, heads: int, sizes: list[int], scale: float
    ) -> Tensor:
        out = x.new_empty(x.size(0), heads, weight.size(0) // (3 * heads))  # (N, H, E)
        lse: list[Tensor] = []
        for first, group in _groups(sizes):
            rows = sum(group)
            qkv = F.linear(x[first : first + rows], weight, bias).view(rows, 3, heads, -1)  # (n, 3, H, E)
            start = 0
            for n in group:
                o, logsumexp = _flash(*(_block(qkv[:, i], start, n) for i in range(3)), scale=scale)
                out[first + start : first + start + n] = o.squeeze(0).transpose(0, 1)  # (n, H, E)
                lse.append(logsumexp)
                start += n
        ctx.save_for_backward(x, weight, bias, out)
        ctx.lse, ctx.sizes, ctx.scale, ctx.heads = lse, sizes, scale, heads
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, bias, out = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dx = torch.empty_like(x) if need_x else None
        dw = torch.zeros_like(weight) if need_w else None
        db = torch.zeros_like(bias) if bias is not None and need_b else None
        lse = iter(ctx.lse)
        for first, group in _groups(ctx.sizes):
            rows = sum(group)
            x_g, d_g, o_g = (t[first : first + rows] for t in (x, d_out, out))
            qkv = F.linear(x_g, weight, bias).view(rows, 3, ctx.heads, -1)  # (n, 3, H, E), recomputed
            d_qkv = torch.empty_like(qkv)
            start = 0
            for n in group:
                grads = _flash_backward(
                    _block(d_g, start, n), *(_block(qkv[:, i], start, n) for i in range(3)),
                    _block(o_g, start, n), next(lse), 0.0, False, scale=ctx.scale,
                )
                for i, g in enumerate(grads):
                    d_qkv[start : start + n, i] = g.squeeze(0).transpose(0, 1)  # (n, H, E)
                start += n
            del qkv
            d_flat = d_qkv.view(rows, -1)  # (n, 3D)
            if dx is not None:
                dx[first : first + rows] = d_flat @ weight
            if dw is not None:
                dw.addmm_(d_flat.t(), x_g)
            if db is not None:
                db += d_flat.sum(0)
        return dx, dw, db, None, None, None


def _fused(q: Tensor, dropout_p: float) -> bool:
    """Whether the CPU kernel and its backward are called directly (no dropout, a dtype they take)."""
    return (
        q.device.type == "cpu" and dropout_p == 0.0 and q.dtype in (torch.float32, torch.float64, torch.bfloat16)
        and not torch.is_autocast_enabled("cpu")
    )


def graph_attention(
    x: Tensor, weight: Tensor, bias: Tensor | None, heads: int, sizes: list[int], dropout_p: float = 0.0
) -> Tensor:
    r"""Softmax self-attention of every node over the nodes of its own graph, on the packed layout, from the
    stacked projection ``weight`` (3D, D) and ``bias`` (3D,) of the queries, keys and values (``torch.nn.
    MultiheadAttention``'s ``in_proj_weight`` and ``in_proj_bias``); scale :math:`1/\sqrt{E}`, E = D / H.

    Args:
        x (Tensor): nodes (N, D), the nodes of each graph contiguous (a PyG ``Batch``'s order).
        weight (Tensor): the stacked projections (3D, D).
        bias (Tensor, optional): their biases (3D,).
        heads (int): attention heads H.
        sizes (list[int]): the node count of each graph, summing to N (:func:`graph_sizes`).
        dropout_p (float, optional): dropout on the weights (pass 0 at eval time). (default: :obj:`0.0`)

    Shapes:
        - **input:** x (N, D), weight (3D, D), bias (3D,)
        - **output:** (N, H, E)

    Examples:
        >>> x, weight = torch.randn(5, 8), torch.randn(24, 8)  # a graph of 3 nodes and one of 2, H = 2
        >>> out = graph_attention(x, weight, None, 2, [3, 2])
        >>> q, k, v = (x[:3] @ weight.T).view(3, 3, 2, 4).permute(1, 2, 0, 3)  # (H, 3, E) each
        >>> torch.allclose(out[:3], F.scaled_dot_product_attention(q, k, v).transpose(0, 1), atol=1e-5)
        True
    """
    N = x.size(0)
    if sum(sizes) != N:
        raise ValueError(f"the graph sizes sum to {sum(sizes)} but there are N = {N} nodes")
    sizes = [n for n in sizes if n > 0]
    if _fused(x, dropout_p):
        return _ProjectedWithinGraphs.apply(x, weight, bias, heads, sizes, (weight.size(0) // (3 * heads)) ** -0.5)
    qkv = F.linear(x, weight, bias).view(N, 3, heads, -1)  # (N, 3, H, E)
    parts = []
    for part in qkv.split(sizes):
        q, k, v = part.permute(1, 2, 0, 3)  # (H, n, E) each
        parts.append(F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p).transpose(0, 1))  # (n, H, E)
    return torch.cat(parts) if parts else qkv.new_zeros(0, heads, qkv.size(-1))


__all__ = ["graph_attention", "graph_sizes", "within_graph_sizes"]
