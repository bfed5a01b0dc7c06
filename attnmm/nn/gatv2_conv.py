r"""Dynamic graph attention convolution, GATv2 (Brody et al., 2022), on attnmm's attention core."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnmm.masks import Mask
from attnmm.nn._edges import node_counts
from attnmm.nn._gat import AdditiveGraphAttention, Weights, glorot_
from attnmm.nn._inputs import check_node_features

#: Floats per (rows, H * C) working buffer of the pair scores: a few MB, reused block after block.
CHUNK_FLOATS = 2**20


class GATv2Conv(AdditiveGraphAttention):
    r"""The dynamic graph attentional operator of `"How Attentive are Graph Attention Networks?"
    <https://arxiv.org/abs/2105.14491>`_ (Brody et al., 2022), a drop-in for PyG's ``GATv2Conv`` that
    runs on attnmm's sparse attention backend.

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in A(i)} \alpha_{i,j} \mathbf{W}_s \mathbf{x}_j, \qquad
        \alpha_{i,j} = \operatorname{softmax}_{j \in A(i)} \mathbf{a}^\top \operatorname{LeakyReLU}\left(
        \mathbf{W}_d \mathbf{x}_i + \mathbf{W}_s \mathbf{x}_j + \mathbf{W}_e \mathbf{e}_{ij} \right)

    per head (then the heads concatenated or averaged, plus an optional residual
    :math:`\mathbf{W}_r \mathbf{x}_i` and a bias), where :math:`A(i) = \{j : (j \to i) \in
    \mathcal{E}\}` is the allowed set of the :class:`~attnmm.masks.Graph` mask of the edges, with a
    self loop per node when ``add_self_loops`` (and united with an extra ``mask``). The score needs the
    (H, C) vector :math:`\mathbf{W}_d \mathbf{x}_i + \mathbf{W}_s \mathbf{x}_j + \mathbf{W}_e
    \mathbf{e}_{ij}` of every allowed pair; it is formed for a block of pairs at a time in reused buffers
    of a few MB (:data:`CHUNK_FLOATS`), reduced to (H,) and dropped (the backward pass forms it again),
    and the scores enter :func:`~attnmm.attend` as a per-pair bias. No (M, H, C) tensor is kept: PyG
    keeps several (the pair sums, their LeakyReLU, the messages).

    Parameter names and shapes are those of PyG's ``GATv2Conv`` (``lin_l`` = :math:`\mathbf{W}_s`,
    ``lin_r`` = :math:`\mathbf{W}_d`, ``att``, ``lin_edge``, ``res``, ``bias``), so its state dict loads
    as is and gives the same outputs, gradients and attention weights. Self loops follow PyG: existing
    ones are removed and one per node :math:`0 \dots \min(N_s, N_d) - 1` is added, with edge features
    given by ``fill_value``. An edge listed twice counts twice in the softmax, as in PyG; only attention
    dropout differs: it drops a pair, not each copy.

    Args:
        in_channels (int or (int, int)): input width, or ``(source, target)`` widths for a bipartite graph.
        out_channels (int): width per head C.
        heads (int, optional): number of heads H. (default: :obj:`1`)
        concat (bool, optional): concatenate the heads (width H * C); else average them (width C).
            (default: :obj:`True`)
        negative_slope (float, optional): slope of the LeakyReLU for negative inputs. (default: :obj:`0.2`)
        dropout (float, optional): dropout on the attention weights in training. (default: :obj:`0.0`)
        add_self_loops (bool, optional): let every node attend itself. (default: :obj:`True`)
        edge_dim (int, optional): edge feature width; ``None`` for no edge term. (default: :obj:`None`)
        fill_value (float or Tensor or str, optional): edge features of the added self loops: a value,
            a tensor, or how to reduce each node's incoming edge features (``"mean"``, ``"add"``,
            ``"max"``, ...). (default: :obj:`"mean"`)
        bias (bool, optional): learn additive biases of the projections and the output. (default: :obj:`True`)
        share_weights (bool, optional): one projection for sources and targets, :math:`\mathbf{W}_s =
            \mathbf{W}_d`. (default: :obj:`False`)
        residual (bool, optional): add the projected target features :math:`\mathbf{W}_r \mathbf{x}_i`.
            (default: :obj:`False`)

    Shapes:
        - **input:** node features x (N, F) or ((N_src, F_src), (N_dst, F_dst)); edge_index (2, M), a
          torch.sparse adjacency (N_dst, N_src), a PyG ``EdgeIndex`` or a packed attnmm
          :class:`~attnmm.masks.Mask`; edge_attr (M, edge_dim), optional; size (N_src, N_dst), optional
          (checked against x); mask, optional
        - **output:** (N_dst, H * C) with ``concat=True``, else (N_dst, C); with a truthy
          ``return_attention_weights`` also ``(edge_index, alpha)``: the edges with the self loops
          added (for a sparse adjacency, the adjacency holding alpha) and alpha (M, H) (with an extra
          ``mask`` or a Mask as ``edge_index``: the (2, P) allowed pairs and their (P, H) weights)

    Examples:
        >>> import torch
        >>> from attnmm.nn import GATv2Conv
        >>> conv = GATv2Conv(16, 8, heads=4, edge_dim=3)
        >>> x = torch.randn(5, 16)  # (N, F)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])  # (2, M): source -> target
        >>> edge_attr = torch.randn(5, 3)  # (M, D); the self loops get the mean of the incoming ones
        >>> out, (ei, alpha) = conv(x, edge_index, edge_attr, return_attention_weights=True)
        >>> out.shape, ei.shape, alpha.shape  # 5 edges and 5 self loops
        (torch.Size([5, 32]), torch.Size([2, 10]), torch.Size([10, 4]))
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1, concat: bool = True,
        negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean", bias: bool = True, share_weights: bool = False,
        residual: bool = False,
    ) -> None:
        super().__init__(
            in_channels, out_channels, heads, concat, negative_slope, dropout, add_self_loops, edge_dim,
            fill_value, residual,
        )  # fmt: skip
        H, C = self.heads, self.out_channels
        if share_weights and self.src_channels != self.dst_channels:
            raise ValueError(f"share_weights=True needs equal source and target widths, got in_channels={in_channels}")
        self.share_weights = share_weights
        # parameters first, then the projections: the order of PyG's state dict
        self.att = nn.Parameter(torch.empty(1, H, C))
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(self.total_out_channels)) if bias else None
        self.lin_l = nn.Linear(self.src_channels, H * C, bias=bias)
        self.lin_r = self.lin_l if share_weights else nn.Linear(self.dst_channels, H * C, bias=bias)
        self.lin_edge = None if self.edge_dim is None else nn.Linear(self.edge_dim, H * C, bias=False)
        self.res = nn.Linear(self.dst_channels, self.total_out_channels, bias=False) if residual else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            if lin is not None:
                glorot_(lin.weight)
                if lin.bias is not None:
                    bound = lin.in_features**-0.5
                    nn.init.uniform_(lin.bias, -bound, bound)
        glorot_(self.att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(
        self, x: Tensor | tuple[Tensor, Tensor], edge_index: Tensor | Mask, edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None, *, size: tuple[int, int] | None = None, mask: Mask | None = None,
    ) -> Tensor | tuple[Tensor, Weights]:
        """Attend along the edges (and the pairs of ``mask``); see the class docstring for shapes.

        A truthy ``return_attention_weights`` also returns ``(edge_index, alpha)``, as PyG does.
        """
        H, C = self.heads, self.out_channels
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        if x_dst is None:
            raise ValueError("GATv2Conv needs target features: pass x or (x_src, x_dst), not (x_src, None)")
        check_node_features("GATv2Conv", x_src, x_dst, self.in_channels, (self.src_channels, self.dst_channels))
        num_src, num_dst = node_counts(x_src, x_dst, size, edge_index)
        values = self.lin_l(x_src).view(-1, H, C)  # (N_src, H, C): W_s x_j
        targets = values if self.share_weights and x_dst is x_src else self.lin_r(x_dst).view(-1, H, C)
        edges = self.edges(edge_index, num_src, num_dst, mask, x_src.device)
        if edge_attr is not None and self.lin_edge is None:
            width = edge_attr.size(-1) if edge_attr.dim() == 2 else 1
            raise ValueError(f"edge_attr was given but the layer has no edge term; build it with edge_dim={width}")
        attr = self.edge_features(edges, edge_attr)
        w_edge = None if attr is None or self.lin_edge is None else self.lin_edge.weight  # (H * C, D)
        att, slope = self.att.view(H, C), self.negative_slope

        def score(dst: Tensor, src: Tensor, feats: Tensor | None) -> Tensor:
            return _PairScore.apply(values, targets, att, src, dst, feats, None if feats is None else w_edge, slope)

        residual = None if self.res is None else self.res(x_dst)
        return self.propagate(
            values, num_dst, edges, score, attr, residual, self.bias, return_attention_weights, edge_index
        )


def _pre_activations(
    xs: Tensor, xd: Tensor, src: Tensor, dst: Tensor, edge_attr: Tensor | None, w_edge: Tensor | None
) -> Iterator[tuple[int, int, Tensor | None, Tensor, Tensor]]:
    r""":math:`\mathbf{z}_p = \mathbf{W}_s \mathbf{x}_j + \mathbf{W}_d \mathbf{x}_i (+ \mathbf{W}_e \mathbf{e}_{ij})`
    of the pairs, a block of :data:`CHUNK_FLOATS` values at a time in two reused buffers: each block's pairs
    ``s:e``, their edge features, z (e - s, H * C) and the second buffer (free for the caller's use)."""
    n, width = src.numel(), xs.size(1)
    rows = max(1, CHUNK_FLOATS // width)
    first, second = xs.new_empty(min(rows, n), width), xs.new_empty(min(rows, n), width)
    for s in range(0, n, rows):
        e = min(s + rows, n)
        feats = None if edge_attr is None else edge_attr[s:e]
        z = torch.index_select(xs, 0, src[s:e], out=first[: e - s])
        z.add_(torch.index_select(xd, 0, dst[s:e], out=second[: e - s]))
        if feats is not None and w_edge is not None:
            z.addmm_(feats, w_edge.t())
        yield s, e, feats, z, second


class _PairScore(torch.autograd.Function):
    r"""GATv2's score of n pairs, :math:`\mathbf{a}_h^\top \operatorname{LeakyReLU}(\mathbf{z}_{p,h})`
    with :math:`\mathbf{z}_p = \mathbf{W}_s \mathbf{x}_{j} + \mathbf{W}_d \mathbf{x}_{i} + \mathbf{W}_e
    \mathbf{e}_p`: x_src (N_src, H, C), x_dst (N_dst, H, C), att (H, C), src/dst (n,), edge_attr (n, D)
    and w_edge (H * C, D) or ``None`` -> (n, H).

    :math:`\mathbf{z}` is formed a block of pairs at a time in two reused buffers and never stored;
    the backward pass forms it again and scatters
    :math:`\partial \mathbf{z}_p = \partial s_{p,h} \mathbf{a}_h \odot \operatorname{LeakyReLU}'(\mathbf{z}_p)`
    to the two nodes (and the edge features) of each pair.
    """

    @staticmethod
    def forward(
        ctx: Any, x_src: Tensor, x_dst: Tensor, att: Tensor, src: Tensor, dst: Tensor, edge_attr: Tensor | None,
        w_edge: Tensor | None, slope: float,
    ) -> Tensor:
        H, C = att.shape
        xs, xd = x_src.reshape(-1, H * C), x_dst.reshape(-1, H * C)  # views of the projections
        out = xs.new_empty(src.numel(), H)
        for s, e, _, z, _ in _pre_activations(xs, xd, src, dst, edge_attr, w_edge):  # z (c, H * C)
            z = F.leaky_relu_(z, slope).view(-1, H, C).mul_(att)
            torch.sum(z, -1, out=out[s:e])  # (c, H)
        ctx.save_for_backward(x_src, x_dst, att, src, dst, edge_attr, w_edge)
        ctx.slope = slope
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        x_src, x_dst, att, src, dst, edge_attr, w_edge = ctx.saved_tensors
        H, C = att.shape
        xs, xd = x_src.reshape(-1, H * C), x_dst.reshape(-1, H * C)
        need = ctx.needs_input_grad
        d_out = d_out.contiguous()
        d_src = torch.zeros_like(xs) if need[0] else None
        d_dst = torch.zeros_like(xd) if need[1] else None
        d_att = torch.zeros_like(att) if need[2] else None
        d_edge = None if edge_attr is None or not need[5] else torch.empty_like(edge_attr)
        d_w = None if w_edge is None or not need[6] else torch.zeros_like(w_edge)
        for s, e, feats, z, scratch in _pre_activations(xs, xd, src, dst, edge_attr, w_edge):  # z (c, H * C)
            d_s = d_out[s:e].unsqueeze(-1)  # (c, H, 1)
            g = torch.mul(d_s, att, out=scratch[: e - s].view(-1, H, C)).view(-1, H * C)  # dL/dLeakyReLU(z)
            g = torch.ops.aten.leaky_relu_backward(g, z, ctx.slope, False)  # dL/dz, (c, H * C)
            if d_att is not None:
                d_att += F.leaky_relu_(z, ctx.slope).view(-1, H, C).mul_(d_s).sum(0)
            if d_src is not None:
                d_src.index_add_(0, src[s:e], g)
            if d_dst is not None:
                d_dst.index_add_(0, dst[s:e], g)
            if d_edge is not None:
                torch.mm(g, w_edge, out=d_edge[s:e])
            if d_w is not None and feats is not None:
                d_w.addmm_(g.t(), feats)
        return (
            None if d_src is None else d_src.view_as(x_src),
            None if d_dst is None else d_dst.view_as(x_dst),
            d_att,
            None,
            None,
            d_edge,
            d_w,
            None,
        )


__all__ = ["GATv2Conv"]
