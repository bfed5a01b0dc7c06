r"""Plumbing shared by :class:`~attnmm.nn.GATConv` and :class:`~attnmm.nn.GATv2Conv`: PyG's self loops
and edge-feature fill, additive scores per allowed pair, and the :func:`~attnmm.attend` call.

Both layers compute, per head,

.. math::
    \mathbf{x}^{\prime}_i = \sum_{j \in A(i)} \alpha_{i,j} \mathbf{v}_j, \qquad
    \alpha_{i,j} = \operatorname{softmax}_{j \in A(i)}\, s(i, j, \mathbf{e}_{ij})

with an additive score :math:`s` that is not a dot product of a query and a key. The layer evaluates
:math:`s` on the allowed pairs only, O(nnz * H) numbers, and hands them to :func:`~attnmm.attend` as
its per-pair ``bias`` with zero-width queries and keys (head dim E = 0, so :math:`\mathbf{q}_i^\top
\mathbf{k}_j = 0` and the score is the bias alone); the sparse backend then sums the value vectors
:math:`\mathbf{v}_j` straight from the (N, H, C) node projections, never copied per edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.attention.core import attend
from attnmm.attention.forms import FormStore
from attnmm.masks import Graph, Mask
from attnmm.nn._edges import (
    EdgeLayout,
    adjacency_key,
    check_edge_attr,
    edge_layout,
    edge_weights,
    layout_of_edges,
    pair_bias,
    read_edges,
)
from attnmm.nn._inputs import check_dropout

#: ``score(dst, src, edge_attr)``: the score (n, H) of the n pairs ``src[k] -> dst[k]``, with the edge
#: features (n, D) of those pairs or ``None`` for no edge term.
ScoreFn = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]

#: What ``return_attention_weights`` gives back: ``(edge_index, alpha)``.
Weights = tuple[Tensor | Mask, Tensor]


def split_channels(in_channels: int | tuple[int, int]) -> tuple[int, int]:
    """``(source, target)`` input widths of an int or a pair, checked."""
    if isinstance(in_channels, int) and not isinstance(in_channels, bool):
        width = check_nonneg_int("in_channels", in_channels, minimum=1)
        return width, width
    if isinstance(in_channels, (tuple, list)) and len(in_channels) == 2:
        return (
            check_nonneg_int("in_channels[0]", in_channels[0], minimum=1),
            check_nonneg_int("in_channels[1]", in_channels[1], minimum=1),
        )
    raise TypeError(f"in_channels must be an int or (source, target) ints, got {in_channels!r}")


def glorot_(t: Tensor) -> Tensor:
    r"""Uniform Glorot initialisation over the last two dims, :math:`U(-b, b)` with
    :math:`b = \sqrt{6 / (\text{fan}_\text{in} + \text{fan}_\text{out})}` (PyG's ``glorot``)."""
    bound = (6.0 / (t.size(-2) + t.size(-1))) ** 0.5
    with torch.no_grad():
        return t.uniform_(-bound, bound)


@dataclass
class GATEdges:
    """The edges of one call after PyG's self-loop handling, and the allowed pairs they map to. It owns
    its tensors (none is a view of the caller's adjacency), so it can be kept for a later call with an
    equal adjacency (:meth:`AdditiveGraphAttention.edges`).

    Attributes:
        layout (EdgeLayout): edges (the kept input edges, then the self loops) and allowed pairs.
        num_edges (int): rows that ``edge_attr`` must have (the input's edges).
        keep (BoolTensor, optional): which input edges are kept (not self loops); ``None`` when no
            loops were added.
        num_loops (int): self loops added, one per node ``0 .. num_loops - 1``.
        returned (Tensor, optional): the sparse adjacency (self loops added) whose copy holds the weights
            returned; ``None`` for other adjacencies (a (2, M) edge_index is returned as given, or with
            the loops as the layout's edges; a Mask adjacency or an extra mask return the allowed pairs).
        kind (str): what the adjacency was: ``"edges"`` (a (2, M) tensor), ``"sparse"`` (a torch.sparse
            matrix) or ``"mask"`` (an attnmm Mask, which has no edges to carry features).
        pairs_returned (bool): whether the allowed pairs are returned with the weights (a Mask
            adjacency or an extra mask), not the edges.
    """

    layout: EdgeLayout
    num_edges: int
    keep: Tensor | None
    num_loops: int
    returned: Tensor | None
    kind: Literal["edges", "sparse", "mask"]
    pairs_returned: bool

    @property
    def nbytes(self) -> int:
        """Bytes held, for the budget of the cache that keeps it."""
        held = self.layout.nbytes + (0 if self.keep is None else self.keep.numel())
        if self.returned is not None:
            held += 2 * self.layout.src.numel() * 8  # a sparse adjacency's indices (its values are ignored)
        return held


def gat_edges(
    edge_index: Tensor | Mask, num_src: int, num_dst: int, add_loops: bool, extra: Mask | None, device: torch.device,
) -> GATEdges:
    """Read ``edge_index`` as PyG's GAT layers do: with ``add_loops``, drop its self loops and add one
    per node ``0 .. min(num_src, num_dst) - 1`` after the other edges (for a sparse adjacency, in its
    sorted order, as PyG's ``add_self_loops`` does); then unite with ``extra``. One sort of the edges
    gives the allowed pairs, each edge's pair and the edges per pair (:func:`layout_of_edges`)."""
    from torch_geometric.utils import add_self_loops, is_torch_sparse_tensor, remove_self_loops

    loops = min(num_src, num_dst) if add_loops else 0
    if isinstance(edge_index, Mask):
        mask = edge_index
        if add_loops:
            index = torch.arange(loops, device=device).repeat(2, 1)  # (2, N)
            mask = mask | Graph(index, (num_src, num_dst))
        layout = edge_layout(mask, num_src, num_dst, extra, device)
        return GATEdges(layout, 0, None, loops, None, "mask", True)
    if isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index):
        num_edges = int(edge_index._nnz())
        adj = edge_index
        if add_loops:
            loops = min(int(adj.size(0)), int(adj.size(1)))
            adj = add_self_loops(remove_self_loops(adj)[0])[0]  # PyG's own order of the edges
        else:
            adj = adj.clone()  # kept: a copy, not the caller's tensor
        layout = edge_layout(adj, num_src, num_dst, extra, device)  # (its edges copies of the adjacency's)
        returned = None if extra is not None else adj
        return GATEdges(layout, num_edges, None, loops, returned, "sparse", extra is not None)
    src, dst, _, _ = read_edges(edge_index, num_src, num_dst)
    keep = None
    if add_loops:
        keep = src != dst
        arange = torch.arange(loops, device=src.device)
        src, dst = torch.cat([src[keep], arange]), torch.cat([dst[keep], arange])  # (M_kept + N,)
    layout = layout_of_edges(src, dst, num_src, num_dst, extra)
    return GATEdges(layout, int(edge_index.size(1)), keep, loops, None, "edges", extra is not None)


def pair_scores(layout: EdgeLayout, score: ScoreFn, edge_attr: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The score bias of every allowed pair (P, H) in ``mask.pairs()`` order, and, with edge features,
    each edge's score (M, H).

    Without edge features a pair's score depends on its two nodes only: it is computed once per pair
    (plus :math:`\\log c` for an edge listed :math:`c` times, which PyG's per-edge softmax counts
    :math:`c` times). With edge features each edge is scored and its copies merged by
    :func:`~attnmm.nn._edges.pair_bias`; pairs that only the extra mask allows get the score without
    edge term.
    """
    if edge_attr is None:
        scores = score(layout.row, layout.col, None)  # (P, H)
        copies = pair_bias(layout, None)  # (P, 1) log-counts, or None without repeated edges
        return (scores if copies is None else scores + copies.to(scores.dtype)), None
    per_edge = score(layout.dst, layout.src, edge_attr)  # (M, H)
    bias = pair_bias(layout, per_edge)
    assert bias is not None
    extra = (layout.counts == 0).nonzero().squeeze(1)
    if extra.numel():
        bias = bias.index_copy(0, extra, score(layout.row[extra], layout.col[extra], None))
    return bias, per_edge


class AdditiveGraphAttention(nn.Module):
    """Base of the GAT layers: the options and the forward pass they share.

    A subclass creates its parameters, projects the node features to the values (N_src, H, C) and a
    score function, and calls :meth:`propagate`.
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, heads: int, concat: bool, negative_slope: float,
        dropout: float, add_self_loops: bool, edge_dim: int | None, fill_value: float | Tensor | str, residual: bool,
    ) -> None:
        super().__init__()
        self._forms = FormStore()  # the edges of the graphs seen, by value, across calls
        self.src_channels, self.dst_channels = split_channels(in_channels)
        self.in_channels = in_channels
        self.out_channels = check_nonneg_int("out_channels", out_channels, minimum=1)
        self.heads = check_nonneg_int("heads", heads, minimum=1)
        self.concat, self.negative_slope, self.dropout = concat, float(negative_slope), check_dropout(dropout)
        self.add_self_loops, self.fill_value, self.residual = add_self_loops, fill_value, residual
        self.edge_dim = None if edge_dim is None else check_nonneg_int("edge_dim", edge_dim, minimum=1)

    @property
    def total_out_channels(self) -> int:
        """Output width: H * C with ``concat``, else C."""
        return self.out_channels * (self.heads if self.concat else 1)

    def edges(
        self, edge_index: Tensor | Mask, num_src: int, num_dst: int, mask: Mask | None, device: torch.device
    ) -> GATEdges:
        """The edges and allowed pairs of this call. Calls reading an equal graph share them through the
        layer's :class:`~attnmm.attention.forms.FormStore`, keyed by the value of the
        adjacency and the mask (:func:`~attnmm.nn._edges.adjacency_key`); a graph that can only be named
        by identity (a large edge_index, or one on an accelerator) is read again at every call, in one
        sort of its edges, so an edit of it in place (even one its version counter misses) is always
        seen. A Mask's pairs are built on ``device``."""
        if mask is not None and not isinstance(mask, Mask):
            raise TypeError(f"mask must be an attnmm Mask or None, got {type(mask).__name__}")
        key = adjacency_key(edge_index, mask, num_src, num_dst, self.add_self_loops, str(device))
        return self._forms.kept(
            key, "gat_edges", lambda: gat_edges(edge_index, num_src, num_dst, self.add_self_loops, mask, device)
        )

    def edge_features(self, edges: GATEdges, edge_attr: Tensor | None) -> Tensor | None:
        """The edge features of every edge of ``edges`` (M, D): the input's, less those of dropped self
        loops, plus ``fill_value`` features for the added loops (as PyG's ``add_self_loops``)."""
        from torch_geometric.utils import add_self_loops

        if edge_attr is None:
            return None
        if edges.kind == "mask":
            raise ValueError(
                "edge_attr needs edges: a Mask adjacency has none; pass the edges as edge_index (2, M) and "
                "the Mask as mask=, or leave edge_attr out"
            )
        if edges.kind == "sparse" and edges.num_loops:
            raise ValueError(
                "edge_attr with add_self_loops=True needs edge_index as a (2, M) tensor, not a sparse "
                "adjacency (PyG's GAT layers refuse this too); convert it with "
                "torch_geometric.utils.to_edge_index or build the layer with add_self_loops=False"
            )
        edge_attr = check_edge_attr(edge_attr, edges.num_edges, self.edge_dim)
        if edges.keep is None:
            return edge_attr
        kept = edges.layout.src.numel() - edges.num_loops  # the input edges kept (not self loops) come first
        index = torch.stack([edges.layout.src[:kept], edges.layout.dst[:kept]])
        return add_self_loops(index, edge_attr[edges.keep], fill_value=self.fill_value, num_nodes=edges.num_loops)[1]

    def propagate(
        self, values: Tensor, num_dst: int, edges: GATEdges, score: ScoreFn, edge_attr: Tensor | None,
        residual: Tensor | None, bias: Tensor | None, return_attention_weights: bool | None, edge_index: Tensor | Mask,
    ) -> Tensor | tuple[Tensor, Weights]:
        """Attend with the additive scores, combine the heads, add the residual and the bias."""
        H, C = self.heads, self.out_channels
        layout = edges.layout
        pair_bias_, edge_scores = pair_scores(layout, score, edge_attr)  # (P, H), (M, H) or None
        q = values.new_zeros(num_dst, H, 0)  # zero-width queries and keys: the score is the bias alone
        k = values.new_zeros(values.size(0), H, 0)
        p = self.dropout if self.training else 0.0
        want = bool(return_attention_weights)  # PyG returns the weights when the flag is truthy
        # the weights are asked for on every call: whether they come back enters attend's choice of
        # backend (and its cost estimates), and the output must not depend on the flag
        out, w = attend(
            q, k, values, layout.mask, bias=pair_bias_, dropout_p=p, return_weights=True, layout="packed"
        )  # (N_dst, H, C)
        out = out.reshape(num_dst, H * C) if self.concat else out.mean(1)  # (N_dst, H*C) or (N_dst, C)
        if residual is not None:
            out = residual.add_(out)  # in place: the projection's output is not needed for its gradient
        if bias is not None and out._base is None and out.dtype == torch.promote_types(out.dtype, bias.dtype):
            out = out.add_(bias)  # in place: attend's backward needs none of its outputs
        elif bias is not None:
            # a new tensor: on a view of attend's output (the heads concatenated), an in-place edit would make
            # autograd copy the whole of it back in the backward (measured: a tenth of the layer's step at
            # N = 100k); or a bf16 output under autocast, promoted, as in PyG
            out = out + bias
        if not want:
            return out
        if edges.pairs_returned:  # a Mask adjacency or an extra mask: the allowed pairs
            return out, (torch.stack([layout.col, layout.row]), w.values)
        if layout.src.numel():
            alpha = edge_weights(layout, w.values, edge_scores, pair_bias_ if edge_scores is not None else None)
        else:
            alpha = out.new_zeros(0, H)
        # copies of what the layer keeps: the caller may edit what it gets back
        if edges.kind == "sparse":
            from torch_geometric.utils.sparse import set_sparse_value

            assert edges.returned is not None
            return out, (set_sparse_value(edges.returned.clone(), alpha), alpha)
        if edges.keep is None:
            return out, (edge_index, alpha)  # as given, as PyG does without self loops
        return out, (torch.stack([layout.src, layout.dst]), alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["AdditiveGraphAttention", "GATEdges", "gat_edges", "glorot_", "pair_scores", "split_channels"]
