r"""Graph transformer convolution (Shi et al., 2021) on attnmm's attention core."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.attention.core import attend
from attnmm.attention.forms import FormStore
from attnmm.masks import Mask
from attnmm.nn._edges import adjacency_key, check_edge_attr, edge_layout, edge_weights, node_counts, pair_bias
from attnmm.nn._gat import split_channels
from attnmm.nn._inputs import check_dropout, check_node_features


class AttentionConv(nn.Module):
    r"""The graph transformer operator of `"Masked Label Prediction: Unified Message Passing Model
    for Semi-Supervised Classification" <https://arxiv.org/abs/2009.03509>`_ (Shi et al., 2021),
    a drop-in for PyG's ``TransformerConv`` that runs on attnmm's sparse attention backend.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \sum_{j \in A(i)} \alpha_{i,j}
        \left(\mathbf{W}_2 \mathbf{x}_j + \mathbf{W}_6 \mathbf{e}_{ij}\right), \qquad
        \alpha_{i,j} = \operatorname{softmax}_{j \in A(i)} \left(
        \frac{(\mathbf{W}_3 \mathbf{x}_i)^\top (\mathbf{W}_4 \mathbf{x}_j + \mathbf{W}_6 \mathbf{e}_{ij})}
        {\sqrt{d}} \right)

    per head, where :math:`A(i) = \{j : (j \to i) \in \mathcal{E}\}` is the allowed set of the
    :class:`~attnmm.masks.Graph` mask of the edges (optionally united with an extra ``mask``). The
    edge term :math:`(\mathbf{W}_3 \mathbf{x}_i)^\top \mathbf{W}_6 \mathbf{e}_{ij} / \sqrt{d}` enters as a
    per-pair score ``bias``, so keys and values are never gathered per edge: time and memory follow
    :math:`O(|\mathcal{E}| H)` plus the node projections. With ``beta=True`` the skip connection is
    gated, :math:`\mathbf{x}^{\prime}_i = \beta_i \mathbf{W}_1 \mathbf{x}_i + (1 - \beta_i)
    \mathbf{m}_i` with :math:`\beta_i = \sigma(\mathbf{w}_5^\top [\mathbf{W}_1 \mathbf{x}_i,
    \mathbf{m}_i, \mathbf{W}_1 \mathbf{x}_i - \mathbf{m}_i])`.

    Parameter names and shapes are those of ``TransformerConv`` (``lin_key``, ``lin_query``,
    ``lin_value``, ``lin_edge``, ``lin_skip``, ``lin_beta``), so its state dict loads as is and
    gives the same outputs and attention weights.

    **Repeated edges.** PyG's softmax runs over edges, so an edge listed twice counts twice. The
    mask's allowed set counts it once; the layer adds :math:`\log \sum_{e \to (i,j)} e^{b_e}` as a
    per-pair bias (:math:`\log c` for :math:`c` copies without edge features), which gives exactly
    PyG's outputs and per-edge weights. Only attention dropout differs: it drops a pair, not each copy.

    Args:
        in_channels (int or (int, int)): input width, or ``(source, target)`` widths for a bipartite graph.
        out_channels (int): width per head C.
        heads (int, optional): number of heads H. (default: :obj:`1`)
        concat (bool, optional): concatenate the heads (width H * C); else average them (width C).
            (default: :obj:`True`)
        beta (bool, optional): gate the skip connection as above. (default: :obj:`False`)
        dropout (float, optional): dropout on the attention weights in training. (default: :obj:`0.0`)
        edge_dim (int, optional): edge feature width; ``None`` for no edge features. (default: :obj:`None`)
        bias (bool, optional): learn additive biases of the projections. (default: :obj:`True`)
        root_weight (bool, optional): add the projected target features :math:`\mathbf{W}_1 \mathbf{x}_i`
            (``False`` also disables ``beta``). (default: :obj:`True`)

    Shapes:
        - **input:** node features x (N, F) or ((N_src, F_src), (N_dst, F_dst)); edge_index (2, M),
          a torch.sparse adjacency (N_dst, N_src), a PyG ``EdgeIndex`` or a packed attnmm
          :class:`~attnmm.masks.Mask`; edge_attr (M, edge_dim), optional; mask, optional
        - **output:** (N_dst, H * C) with ``concat=True``, else (N_dst, C); with
          ``return_attention_weights`` also ``(edge_index, alpha)``, alpha (M, H) in the order of the
          input edges (with an extra ``mask`` or a Mask as ``edge_index``: the (2, P) allowed pairs
          and their (P, H) weights)

    Examples:
        >>> import torch
        >>> from attnmm.nn import AttentionConv
        >>> conv = AttentionConv(16, 8, heads=4)
        >>> x = torch.randn(5, 16)  # (N, F)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])  # (2, M): source -> target
        >>> out, (ei, alpha) = conv(x, edge_index, return_attention_weights=True)
        >>> out.shape, alpha.shape
        (torch.Size([5, 32]), torch.Size([5, 4]))
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1, concat: bool = True,
        beta: bool = False, dropout: float = 0.0, edge_dim: int | None = None, bias: bool = True,
        root_weight: bool = True,
    ) -> None:
        super().__init__()
        self._forms = FormStore()  # edge layouts of the graphs seen, by value, across calls
        src_dim, dst_dim = split_channels(in_channels)
        in_channels = in_channels if isinstance(in_channels, int) else (src_dim, dst_dim)
        self.in_channels = in_channels
        self.out_channels = C = check_nonneg_int("out_channels", out_channels, minimum=1)
        self.heads = H = check_nonneg_int("heads", heads, minimum=1)
        self.concat, self.dropout, self.root_weight = concat, check_dropout(dropout), root_weight
        self.beta = beta and root_weight
        self.edge_dim = None if edge_dim is None else check_nonneg_int("edge_dim", edge_dim, minimum=1)
        self.lin_key = nn.Linear(src_dim, H * C, bias=bias)
        self.lin_query = nn.Linear(dst_dim, H * C, bias=bias)
        self.lin_value = nn.Linear(src_dim, H * C, bias=bias)
        self.lin_edge: nn.Linear | None = None if edge_dim is None else nn.Linear(edge_dim, H * C, bias=False)
        width = H * C if concat else C
        self.lin_skip = nn.Linear(dst_dim, width, bias=bias)  # kept when unused, as in TransformerConv
        self.lin_beta: nn.Linear | None = nn.Linear(3 * width, 1, bias=False) if self.beta else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def forward(
        self, x: Tensor | tuple[Tensor, Tensor], edge_index: Tensor | Mask, edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None, mask: Mask | None = None,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """Attend along the edges (and the pairs of ``mask``); see the class docstring for shapes.

        ``return_attention_weights`` set to any bool also returns ``(edge_index, alpha)``, as PyG does.
        """
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        if x_dst is None:
            raise ValueError("AttentionConv needs target features: pass x or (x_src, x_dst), not (x_src, None)")
        widths = (self.lin_key.in_features, self.lin_query.in_features)
        check_node_features("AttentionConv", x_src, x_dst, self.in_channels, widths)
        H, C = self.heads, self.out_channels
        N_src, N_dst = node_counts(x_src, x_dst, None, edge_index)
        # kept by the value of the edges and the mask, as AdditiveGraphAttention.edges keeps its edges: the same
        # layout gives the same mask object, whose CSR form the sparse backend re-uses
        key = adjacency_key(edge_index, mask, N_src, N_dst, str(x_dst.device))
        layout = self._forms.kept(key, "layout", lambda: edge_layout(edge_index, N_src, N_dst, mask, x_dst.device))
        # (N, H, C) views of the projections: the sparse backend works on them in place
        q = self.lin_query(x_dst).view(-1, H, C)  # (N_dst, H, C)
        k = self.lin_key(x_src).view(-1, H, C)  # (N_src, H, C)
        v = self.lin_value(x_src).view(-1, H, C)  # (N_src, H, C)
        edge = edge_bias = None
        if self.lin_edge is not None:
            edge_attr = check_edge_attr(edge_attr, layout.src.numel(), self.edge_dim)
            edge = self.lin_edge(edge_attr).view(-1, H, C)  # (M, H, C)
            edge_bias = (q[layout.dst] * edge).sum(-1) / math.sqrt(C)  # (M, H)
        bias = pair_bias(layout, edge_bias)  # (P, H) or None
        p = self.dropout if self.training else 0.0
        # the weights are asked for on every call, as in AdditiveGraphAttention.propagate (and PyG forms alpha
        # on every call too)
        out, w = attend(
            q, k, v, layout.mask, bias=bias, dropout_p=p, return_weights=True, layout="packed"
        )  # (N_dst, H, C)
        pair_w = w.values  # (P, H)
        alpha = None
        if layout.src.numel() and (edge is not None or isinstance(return_attention_weights, bool)):
            alpha = edge_weights(layout, pair_w, edge_bias, bias)  # (M, H)
        if edge is not None and alpha is not None:
            out = out.index_add(0, layout.dst, alpha.unsqueeze(-1) * edge)  # sum_j alpha_ij W_6 e_ij
        out = out.reshape(N_dst, H * C) if self.concat else out.mean(1)  # (N_dst, H*C) or (N_dst, C)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                gate = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()  # (N_dst, 1)
                out = gate * x_r + (1 - gate) * out
            else:
                out = x_r.add_(out)  # in place: the projection's output is not needed for its gradient
        if not isinstance(return_attention_weights, bool):
            return out
        if isinstance(edge_index, Mask) or mask is not None:
            return out, (torch.stack([layout.col, layout.row]), pair_w)
        if alpha is None:  # no edges
            alpha = out.new_zeros(0, H)
        return out, (edge_index, alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["AttentionConv"]
