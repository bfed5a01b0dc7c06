r"""Feature-similarity neighbours: a :class:`~attnmm.masks.Graph` mask from node features, not edges.

On heterophilous graphs (neighbours mostly of other classes) the nodes whose features look alike are
often better company than the graph's neighbours; global graph transformers find them by attending
everything, this mask keeps the k most similar only, at O(N k) pairs.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.masks.graph import Graph

Metric = Literal["cosine", "euclidean"]


def feature_knn(
    x: Tensor,
    k: int,
    batch: Tensor | None = None,
    metric: Metric = "cosine",
    chunk_size: int = 1024,
) -> Graph:
    r"""The k nearest neighbours of every node by its features, within its graph:

    .. math::
        A(i) = \operatorname{top-}k_{\,j \ne i,\; g(j) = g(i)}\; s(\mathbf{x}_i, \mathbf{x}_j)

    with :math:`s` the cosine similarity (``"cosine"``) or minus the Euclidean distance
    (``"euclidean"``), :math:`g` the graph of a node (PyG's ``batch``). A node never attends itself
    (unite with :func:`~attnmm.masks.graph_helpers.self_loops` for that); a node whose graph has at
    most k other nodes attends all of them. Ties are broken towards the lower node index. The mask is
    directed: j is among i's neighbours, not necessarily i among j's. Similarities are computed for
    ``chunk_size`` query nodes at a time, so memory is O(chunk_size x N), never N x N.

    Args:
        x (Tensor): node features (N, F).
        k (int): neighbours per node, >= 1.
        batch (LongTensor, optional): graph of each node (N,), sorted (PyG's ``batch``); ``None`` for
            one graph. (default: :obj:`None`)
        metric (str, optional): ``"cosine"`` or ``"euclidean"``. (default: :obj:`"cosine"`)
        chunk_size (int, optional): query nodes per block of similarities. (default: :obj:`1024`)

    Returns:
        Graph: the mask over N nodes, key j -> query i for each of i's neighbours.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 1.0]])
        >>> print(feature_knn(x, k=1).picture(4))
        0 1 0 0
        1 0 0 0
        0 0 0 1
        0 0 1 0
    """
    if x.dim() != 2:
        raise ValueError(f"x must be node features of shape (N, F), got shape {tuple(x.shape)}")
    k = check_nonneg_int("k", k, minimum=1)
    chunk_size = check_nonneg_int("chunk_size", chunk_size, minimum=1)
    if metric not in ("cosine", "euclidean"):
        raise ValueError(f"metric must be 'cosine' or 'euclidean', got {metric!r}")
    N = x.size(0)
    if batch is not None and (batch.dim() != 1 or batch.numel() != N):
        raise ValueError(f"batch must have shape (N,) = ({N},), got shape {tuple(batch.shape)}; pass PyG's batch")
    if batch is not None and N and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted (the nodes of each graph together, as PyG packs them)")
    x = x.detach().float()
    if metric == "cosine":
        x = F.normalize(x, dim=1)
    graph = torch.zeros(N, dtype=torch.long, device=x.device) if batch is None else batch.long()
    counts = torch.bincount(graph, minlength=int(graph.max()) + 1 if N else 0)
    starts = counts.cumsum(0) - counts
    srcs, dsts = [], []
    for start, count in zip(starts.tolist(), counts.tolist(), strict=True):
        if count < 2:
            continue
        xs = x[start : start + count]
        take = min(k, count - 1)
        for lo in range(0, count, chunk_size):
            rows = torch.arange(lo, min(lo + chunk_size, count), device=x.device)
            if metric == "cosine":
                score = xs[rows] @ xs.T  # (chunk, count)
            else:
                score = -torch.cdist(xs[rows], xs)
            score[torch.arange(rows.numel(), device=x.device), rows] = float("-inf")  # never itself
            # stable descending sort: ties go to the lower index
            order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :take]  # (chunk, k)
            srcs.append(start + order.reshape(-1))
            dsts.append(start + rows.repeat_interleave(take))
    if not srcs:
        return Graph(torch.zeros(2, 0, dtype=torch.long, device=x.device), N)
    return Graph(torch.stack([torch.cat(srcs), torch.cat(dsts)]), N)


__all__ = ["feature_knn"]
