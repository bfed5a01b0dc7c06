"""Plumbing of :class:`~attnmm.nn.AttentionConv`: reading PyG's adjacency formats and mapping edges to pairs."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnmm.masks import Graph, Mask
from attnmm.masks._key import value_key


@dataclass
class EdgeLayout:
    """The edges of one call and the allowed pairs they map to.

    Attributes:
        src (LongTensor): source (key) node of each input edge (M,), in input order.
        dst (LongTensor): target (query) node of each input edge (M,).
        mask (Mask): the allowed set, the edges' :class:`~attnmm.masks.Graph` (united with any extra mask).
        row (LongTensor): query of each allowed pair (P,), in ``mask.pairs()`` order.
        col (LongTensor): key of each allowed pair (P,).
        edge_pair (LongTensor): allowed pair of each input edge (M,).
        counts (LongTensor): number of input edges of each pair (P,); 0 for pairs added by the extra mask.
        duplicates (bool): whether some pair holds several input edges.
    """

    src: Tensor
    dst: Tensor
    mask: Mask
    row: Tensor
    col: Tensor
    edge_pair: Tensor
    counts: Tensor
    duplicates: bool

    @property
    def nbytes(self) -> int:
        """Bytes the layout holds (its edges, pairs and counts, and the sorted keys of its graph), for the
        budget of the cache that keeps it."""
        held = (self.src, self.dst, self.row, self.col, self.edge_pair, self.counts)
        return sum(t.numel() * t.element_size() for t in held) + self.row.numel() * 8


def adjacency_key(edge_index: object, mask: Mask | None, *rest: object) -> Hashable | None:
    """A key of the edges of an adjacency (an edge_index (2, M), a PyG ``EdgeIndex``, a torch.sparse
    matrix's indices or a Mask), an extra mask and ``rest`` (sizes, options) by value
    (:func:`~attnmm.masks._key.value_key`), or ``None`` when some part can only be named by identity (a
    large tensor, or one on an accelerator): then what is derived from them must not outlive the call.
    A sparse matrix's values are left out: the layers read its edges only."""
    from torch_geometric.utils import is_torch_sparse_tensor

    edges: object = edge_index
    if isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index):
        layout = edge_index.layout
        if layout == torch.sparse_coo:
            parts: tuple[Tensor, ...] = (edge_index._indices(),)
            coalesced = edge_index.is_coalesced()
        elif layout == torch.sparse_csr:
            parts, coalesced = (edge_index.crow_indices(), edge_index.col_indices()), True
        else:
            parts, coalesced = (edge_index.ccol_indices(), edge_index.row_indices()), True
        edges = ("sparse", str(layout), tuple(edge_index.shape), coalesced, *parts)
    elif isinstance(edge_index, Tensor) and type(edge_index) is not Tensor and hasattr(edge_index, "as_tensor"):
        edges = ("EdgeIndex", edge_index.as_tensor(), declared_size(edge_index))
    return value_key((edges, mask, *rest))


def read_edges(edge_index: object, num_src: int, num_dst: int) -> tuple[Tensor, Tensor, int, int]:
    """``(src, dst, num_src, num_dst)`` of an edge_index Tensor, PyG ``EdgeIndex`` or torch.sparse
    adjacency (read as PyG does: a sparse matrix is the transposed adjacency, rows are targets)."""
    from torch_geometric.utils import is_torch_sparse_tensor, to_edge_index

    if isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index):
        if edge_index.dim() != 2:
            raise ValueError(f"a sparse adjacency must be a matrix (N_dst, N_src), got shape {tuple(edge_index.shape)}")
        (dst, src), _ = to_edge_index(edge_index)
        return src, dst, int(edge_index.size(1)), int(edge_index.size(0))
    if isinstance(edge_index, Tensor):
        pairs: Tensor = edge_index
        if type(pairs) is not Tensor and hasattr(pairs, "as_tensor"):  # PyG's EdgeIndex
            pairs = pairs.as_tensor()
        if pairs.dim() != 2 or pairs.size(0) != 2 or pairs.is_floating_point():
            raise ValueError(
                f"edge_index must be an integer tensor of shape (2, M), a torch.sparse adjacency or an "
                f"attnmm Mask, got {pairs.dtype} of shape {tuple(pairs.shape)}"
            )
        return pairs[0].long(), pairs[1].long(), num_src, num_dst
    raise TypeError(
        f"edge_index must be a Tensor (2, M), a torch.sparse adjacency, a PyG EdgeIndex or an attnmm Mask, "
        f"got {type(edge_index).__name__}"
    )


def declared_size(edge_index: object) -> tuple[int | None, int | None]:
    """``(N_src, N_dst)`` that the adjacency itself declares, as PyG reads it: the shape of a torch.sparse
    matrix (N_dst, N_src) and the sparse size of a PyG ``EdgeIndex`` (either part may be ``None``);
    ``(None, None)`` for a plain edge_index or a Mask."""
    from torch_geometric.utils import is_torch_sparse_tensor

    if isinstance(edge_index, Tensor) and is_torch_sparse_tensor(edge_index):
        return int(edge_index.size(1)), int(edge_index.size(0))
    if isinstance(edge_index, Tensor) and type(edge_index) is not Tensor and hasattr(edge_index, "sparse_size"):
        return edge_index.sparse_size()  # PyG's EdgeIndex: (N_src, N_dst), None where unknown
    return None, None


def node_counts(
    x_src: Tensor, x_dst: Tensor | None, size: tuple[int | None, int | None] | None = None, edge_index: object = None,
) -> tuple[int, int]:
    """``(N_src, N_dst)`` of one call, from the node features, PyG's ``size`` and the sizes a sparse
    adjacency or an ``EdgeIndex`` declares (:func:`declared_size`), which must all agree. A missing
    target set (``x_dst=None``) has as many nodes as ``size`` or the adjacency say, else as many as the
    sources (PyG's rule)."""
    if size is not None and (not isinstance(size, (tuple, list)) or len(size) != 2):
        raise ValueError(f"size must be (N_src, N_dst), got {size!r}")
    given = (None, None) if size is None else (size[0], size[1])
    declared = declared_size(edge_index)
    if any(g is not None and d is not None and g != d for g, d in zip(given, declared)):
        raise ValueError(
            f"size={tuple(given)} does not match the adjacency, which is (N_src, N_dst) = {declared}; "
            f"pass size=None (the adjacency gives the sizes)"
        )
    expected = tuple(d if d is not None else g for g, d in zip(given, declared))
    num_src = int(x_src.size(0))
    num_dst = None if x_dst is None else int(x_dst.size(0))
    if (expected[0] is not None and expected[0] != num_src) or (
        expected[1] is not None and num_dst is not None and expected[1] != num_dst
    ):
        if declared == (None, None):
            fix = f"size={tuple(given)} does not match the node features: (N_src, N_dst) = ({num_src}, {num_dst}); "
            fix += "pass size=None or features with those many rows"
        else:
            fix = f"the adjacency is (N_src, N_dst) = {expected} but the node features have ({num_src}, {num_dst}) "
            fix += "rows; pass features with those many rows or an adjacency of their sizes"
        raise ValueError(fix)
    if num_dst is None:
        num_dst = num_src if expected[1] is None else int(expected[1])
    return num_src, num_dst


def edge_layout(
    edge_index: object, num_src: int, num_dst: int, extra: Mask | None, device: torch.device | None = None
) -> EdgeLayout:
    """The edges of ``edge_index`` and the allowed pairs (on ``device`` when edge_index is a Mask): the
    edge set united with ``extra``."""
    if isinstance(edge_index, Mask):
        src = dst = torch.zeros(0, dtype=torch.long, device=device)
        mask = edge_index if extra is None else edge_index | _checked(extra)
        pairs = mask.pairs(num_dst, num_src, device=device)
        counts = torch.zeros(pairs.nnz, dtype=torch.long, device=pairs.row.device)
        return EdgeLayout(src, dst, mask, pairs.row, pairs.col, src, counts, False)  # (no edge, so no edge's pair)
    src, dst, num_src, num_dst = read_edges(edge_index, num_src, num_dst)
    return layout_of_edges(src, dst, num_src, num_dst, extra)


def layout_of_edges(src: Tensor, dst: Tensor, num_src: int, num_dst: int, extra: Mask | None) -> EdgeLayout:
    """The layout of the edges ``src[k] -> dst[k]`` (LongTensors (M,)) united with ``extra``, from one
    sort of the edges (:meth:`Graph._with_edge_pairs`: the pairs, each edge's pair and the edges per
    pair at once). The layout owns its tensors: none is a view of ``src`` or ``dst``, so it stays valid
    whatever happens to the caller's edge_index."""
    graph, edge_pair, counts = Graph._with_edge_pairs(src, dst, (num_src, num_dst))
    src, dst = graph.edge_index[0], graph.edge_index[1]  # views of the graph's own copy
    duplicates = graph.num_edges < src.numel()  # known on the host: no device synchronisation
    if extra is None:
        pairs = graph.pairs(num_dst, num_src, device=src.device)
        return EdgeLayout(src, dst, graph, pairs.row, pairs.col, edge_pair, counts, duplicates)
    mask = graph | _checked(extra)
    pairs = mask.pairs(num_dst, num_src, device=src.device)
    # the edges' pairs among the union's (both sorted by (row, col)): one binary search per distinct edge
    where = torch.searchsorted(pairs.row * num_src + pairs.col, graph._keys)  # (P_edges,)
    union_counts = torch.zeros(pairs.nnz, dtype=counts.dtype, device=counts.device).index_copy_(0, where, counts)
    return EdgeLayout(src, dst, mask, pairs.row, pairs.col, where[edge_pair], union_counts, duplicates)


def check_edge_attr(edge_attr: Tensor | None, num_edges: int, edge_dim: int | None) -> Tensor:
    """``edge_attr`` as (M, edge_dim), one row per edge of edge_index ((M,) read as (M, 1)), else raise."""
    if edge_attr is not None and edge_attr.dim() == 1:
        edge_attr = edge_attr.view(-1, 1)  # (M, 1)
    if edge_attr is None or edge_attr.dim() != 2 or tuple(edge_attr.shape) != (num_edges, edge_dim):
        got = None if edge_attr is None else tuple(edge_attr.shape)
        raise ValueError(f"edge_dim={edge_dim} needs edge_attr of shape (M, {edge_dim}) = ({num_edges}, {edge_dim}), "
                         f"one row per edge of edge_index, got {got}")
    return edge_attr


def _checked(extra: object) -> Mask:
    if not isinstance(extra, Mask):
        raise TypeError(f"mask must be an attnmm Mask or None, got {type(extra).__name__}")
    return extra


def pair_bias(layout: EdgeLayout, edge_bias: Tensor | None) -> Tensor | None:
    r"""Score bias per allowed pair (P, H) that makes the pair stand for all its input edges.

    A pair :math:`p` with edges :math:`e` of biases :math:`b_e` gets
    :math:`\log \sum_{e \to p} \exp(b_e)`, so its softmax weight is the sum of its edges' weights
    (duplicate edges count as often as they appear, as in PyG's per-edge softmax). Pairs without
    input edges (from an extra mask) get 0. ``None`` when no bias is needed.
    """
    P = layout.row.numel()
    if edge_bias is None:
        if not layout.duplicates:
            return None
        return layout.counts.clamp(min=1).log().to(torch.get_default_dtype()).unsqueeze(1)  # (P, 1)
    if not layout.duplicates:
        return edge_bias.new_zeros(P, edge_bias.size(1)).index_copy(0, layout.edge_pair, edge_bias)  # (P, H)
    index = layout.edge_pair.unsqueeze(1).expand_as(edge_bias)
    top = edge_bias.new_full((P, edge_bias.size(1)), float("-inf"))
    top = top.scatter_reduce(0, index, edge_bias.detach(), "amax").nan_to_num(0.0, 0.0, 0.0)  # (P, H)
    total = edge_bias.new_zeros(P, edge_bias.size(1)).index_add(
        0, layout.edge_pair, (edge_bias - top[layout.edge_pair]).exp()
    )
    has_edges = (layout.counts > 0).unsqueeze(1)
    return torch.where(has_edges, top + total.clamp(min=1e-30).log(), torch.zeros_like(top))


def edge_weights(layout: EdgeLayout, pair_weights: Tensor, edge_bias: Tensor | None, bias: Tensor | None) -> Tensor:
    """Weight of each input edge (M, H) from the weights of the pairs (P, H)."""
    w = pair_weights[layout.edge_pair]  # (M, H)
    if not layout.duplicates:
        return w
    if edge_bias is None:
        return w / layout.counts[layout.edge_pair].unsqueeze(1).to(w.dtype)
    assert bias is not None
    return w * (edge_bias - bias[layout.edge_pair]).exp()
