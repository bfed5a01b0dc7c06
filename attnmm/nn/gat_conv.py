r"""Graph attention convolution (Veličković et al., 2018) on attnmm's attention core."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm.masks import Mask
from attnmm.nn._edges import node_counts
from attnmm.nn._gat import AdditiveGraphAttention, Weights, glorot_
from attnmm.nn._inputs import check_node_features


class GATConv(AdditiveGraphAttention):
    r"""The graph attentional operator of `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ (Veličković et al., 2018), a drop-in for PyG's ``GATConv``
    that runs on attnmm's sparse attention backend.

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in A(i)} \alpha_{i,j} \mathbf{W}_s \mathbf{x}_j, \qquad
        \alpha_{i,j} = \operatorname{softmax}_{j \in A(i)} \operatorname{LeakyReLU}\left(
        \mathbf{a}_d^\top \mathbf{W}_d \mathbf{x}_i + \mathbf{a}_s^\top \mathbf{W}_s \mathbf{x}_j
        + \mathbf{a}_e^\top \mathbf{W}_e \mathbf{e}_{ij} \right)

    per head (then the heads concatenated or averaged, plus an optional residual
    :math:`\mathbf{W}_r \mathbf{x}_i` and a bias), where :math:`A(i) = \{j : (j \to i) \in
    \mathcal{E}\}` is the allowed set of the :class:`~attnmm.masks.Graph` mask of the edges, with a
    self loop per node when ``add_self_loops`` (and united with an extra ``mask``). :math:`\mathbf{W}_s
    = \mathbf{W}_d` unless ``in_channels`` is a pair. The score is computed once per allowed pair, from
    the node terms :math:`\mathbf{a}^\top \mathbf{W} \mathbf{x}` (N, H) and the edge term (M, H), and
    enters :func:`~attnmm.attend` as a per-pair bias: the messages :math:`\alpha_{i,j} \mathbf{W}_s
    \mathbf{x}_j`, (M, H, C) in PyG, are never formed.

    Parameter names and shapes are those of PyG's ``GATConv`` (``lin`` or ``lin_src``/``lin_dst``,
    ``att_src``, ``att_dst``, ``lin_edge``, ``att_edge``, ``res``, ``bias``), so its state dict loads
    as is and gives the same outputs, gradients and attention weights. Self loops follow PyG: existing
    ones are removed and one per node :math:`0 \dots \min(N_s, N_d) - 1` is added, with edge features
    given by ``fill_value``. An edge listed twice counts twice in the softmax, as in PyG (see
    :class:`~attnmm.nn.AttentionConv`); only attention dropout differs: it drops a pair, not each copy.

    Args:
        in_channels (int or (int, int)): input width, or ``(source, target)`` widths for a bipartite graph
            (separate projections ``lin_src``, ``lin_dst``).
        out_channels (int): width per head C.
        heads (int, optional): number of heads H. (default: :obj:`1`)
        concat (bool, optional): concatenate the heads (width H * C); else average them (width C).
            (default: :obj:`True`)
        negative_slope (float, optional): slope of the LeakyReLU for negative inputs. (default: :obj:`0.2`)
        dropout (float, optional): dropout on the attention weights in training. (default: :obj:`0.0`)
        add_self_loops (bool, optional): let every node attend itself. (default: :obj:`True`)
        edge_dim (int, optional): edge feature width; ``None`` for no edge term. Without ``edge_dim``
            an ``edge_attr`` is ignored, as in PyG. (default: :obj:`None`)
        fill_value (float or Tensor or str, optional): edge features of the added self loops: a value,
            a tensor, or how to reduce each node's incoming edge features (``"mean"``, ``"add"``,
            ``"max"``, ...). (default: :obj:`"mean"`)
        bias (bool, optional): learn an output bias. (default: :obj:`True`)
        residual (bool, optional): add the projected target features :math:`\mathbf{W}_r \mathbf{x}_i`.
            (default: :obj:`False`)

    Shapes:
        - **input:** node features x (N, F) or ((N_src, F_src), (N_dst, F_dst)) (the target features may
          be ``None``: then ``size``, a sparse adjacency or an ``EdgeIndex`` of known size gives N_dst,
          else N_dst = N_src); edge_index (2, M), a torch.sparse adjacency (N_dst, N_src), a PyG
          ``EdgeIndex`` or a packed attnmm :class:`~attnmm.masks.Mask`; edge_attr (M, edge_dim),
          optional; size (N_src, N_dst), optional (checked against x and the adjacency); mask, optional
        - **output:** (N_dst, H * C) with ``concat=True``, else (N_dst, C); with a truthy
          ``return_attention_weights`` also ``(edge_index, alpha)``: the edges with the self loops
          added (for a sparse adjacency, the adjacency holding alpha) and alpha (M, H) (with an extra
          ``mask`` or a Mask as ``edge_index``: the (2, P) allowed pairs and their (P, H) weights)

    Examples:
        >>> import torch
        >>> from attnmm.nn import GATConv
        >>> conv = GATConv(16, 8, heads=4)
        >>> x = torch.randn(5, 16)  # (N, F)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])  # (2, M): source -> target
        >>> out, (ei, alpha) = conv(x, edge_index, return_attention_weights=True)
        >>> out.shape, ei.shape, alpha.shape  # 5 edges and 5 self loops
        (torch.Size([5, 32]), torch.Size([2, 10]), torch.Size([10, 4]))
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1, concat: bool = True,
        negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean", bias: bool = True, residual: bool = False,
    ) -> None:
        super().__init__(
            in_channels, out_channels, heads, concat, negative_slope, dropout, add_self_loops, edge_dim,
            fill_value, residual,
        )  # fmt: skip
        H, C = self.heads, self.out_channels
        # parameters first, then the projections: the order of PyG's state dict
        self.att_src = nn.Parameter(torch.empty(1, H, C))
        self.att_dst = nn.Parameter(torch.empty(1, H, C))
        self.att_edge: nn.Parameter | None = None if self.edge_dim is None else nn.Parameter(torch.empty(1, H, C))
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(self.total_out_channels)) if bias else None
        shared = isinstance(in_channels, int)
        self.lin = nn.Linear(self.src_channels, H * C, bias=False) if shared else None
        self.lin_src = None if shared else nn.Linear(self.src_channels, H * C, bias=False)
        self.lin_dst = None if shared else nn.Linear(self.dst_channels, H * C, bias=False)
        self.lin_edge = None if self.edge_dim is None else nn.Linear(self.edge_dim, H * C, bias=False)
        self.res = nn.Linear(self.dst_channels, self.total_out_channels, bias=False) if residual else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                glorot_(lin.weight)
        for att in (self.att_src, self.att_dst, self.att_edge):
            if att is not None:
                glorot_(att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _fold(self, lin: nn.Linear, att: Tensor) -> Tensor:
        r"""The (D, H) matrix :math:`[\mathbf{a}_h^\top \mathbf{W}_h]_h` giving each head's term
        :math:`\mathbf{a}_h^\top \mathbf{W}_h \mathbf{x}` of D features with one (n, D) @ (D, H) product,
        without the (n, H, C) projections and their products with the attention vector that PyG forms
        (for the edges: no (M, H, C) projection at all)."""
        H, C = self.heads, self.out_channels
        return torch.einsum("hcf,hc->fh", lin.weight.view(H, C, -1), att.view(H, C))  # (D, H)

    def forward(
        self, x: Tensor | tuple[Tensor, Tensor | None], edge_index: Tensor | Mask, edge_attr: Tensor | None = None,
        size: tuple[int, int] | None = None, return_attention_weights: bool | None = None, *, mask: Mask | None = None,
    ) -> Tensor | tuple[Tensor, Weights]:
        """Attend along the edges (and the pairs of ``mask``); see the class docstring for shapes.

        A truthy ``return_attention_weights`` also returns ``(edge_index, alpha)``, as PyG does.
        """
        H, C = self.heads, self.out_channels
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        check_node_features("GATConv", x_src, x_dst, self.in_channels, (self.src_channels, self.dst_channels))
        num_src, num_dst = node_counts(x_src, x_dst, size, edge_index)
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        assert lin_src is not None and lin_dst is not None
        values = lin_src(x_src).view(-1, H, C)  # (N_src, H, C)
        # the node terms a_s^T W_s x_j and a_d^T W_d x_i, each one (N, F) @ (F, H) product with the folded
        # weights (:meth:`_fold`) rather than a product and a sum over the (N, H, C) projections (PyG's
        # order, equal up to rounding); the targets' projection is not needed at all
        a_src = x_src @ self._fold(lin_src, self.att_src)  # (N_src, H)
        a_dst = None if x_dst is None else x_dst @ self._fold(lin_dst, self.att_dst)  # (N_dst, H)
        edges = self.edges(edge_index, num_src, num_dst, mask, x_src.device)
        attr = self.edge_features(edges, edge_attr) if self.lin_edge is not None else None
        w_edge = None
        if attr is not None:
            assert self.lin_edge is not None and self.att_edge is not None
            w_edge = self._fold(self.lin_edge, self.att_edge)  # (D, H)
        slope = self.negative_slope

        def score(dst: Tensor, src: Tensor, feats: Tensor | None) -> Tensor:
            s = a_src.index_select(0, src)  # (n, H)
            if a_dst is not None:
                s = s.add_(a_dst.index_select(0, dst))
            if feats is not None:
                assert w_edge is not None
                s = s.addmm_(feats, w_edge)  # + a_e^T W_e e_ij
            return F.leaky_relu(s, slope)

        residual = None if self.res is None or x_dst is None else self.res(x_dst)
        return self.propagate(
            values, num_dst, edges, score, attr, residual, self.bias, return_attention_weights, edge_index
        )


__all__ = ["GATConv"]
