r"""Positional and structural encodings of graphs, computed per graph with PyG's transforms (a dataset's graphs
get theirs once, cached on disk, by :func:`attnmm.data.encodings.add_encodings`)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int

Encoding = Literal["none", "laplacian", "random_walk"]

__all__ = ["Encoding", "encoding_attr", "graph_encoding"]


def encoding_attr(kind: Encoding) -> str:
    """The ``Data`` attribute an encoding is stored under: ``"laplacian_pe"`` or ``"random_walk_pe"``
    (PyG's names)."""
    return f"{kind}_pe"


def _check_kind(kind: str) -> None:
    if kind not in ("laplacian", "random_walk"):
        raise ValueError(f"the encoding must be 'laplacian' or 'random_walk', got {kind!r}")


def graph_encoding(data: Any, kind: Encoding, dim: int) -> Tensor:
    r"""The encoding (N, dim) of one graph ``data`` (a PyG ``Data``), by PyG's transforms.

    - ``"random_walk"`` (RWSE, Dwivedi et al., 2022): the return probabilities of random walks of 1 to
      ``dim`` steps, :math:`p_i = [(\mathbf{D}^{-1}\mathbf{A})^k_{ii}]_{k=1}^{\mathrm{dim}}`
      (``AddRandomWalkPE``).
    - ``"laplacian"`` (LapPE): the eigenvectors of the symmetric normalised Laplacian with the ``dim``
      smallest non-trivial eigenvalues (``AddLaplacianEigenvectorPE``; signs are arbitrary). A graph of
      at most ``dim`` nodes has fewer: the missing columns are zeros.

    Args:
        data (Data): the graph (``edge_index`` and ``num_nodes``).
        kind (str): ``"random_walk"`` or ``"laplacian"``.
        dim (int): the encoding's width.

    Shapes:
        - **output:** (N, dim), float32

    Examples:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> ring = Data(edge_index=torch.tensor([[0, 1, 2, 1, 2, 0], [1, 2, 0, 0, 1, 2]]), num_nodes=3)
        >>> graph_encoding(ring, "random_walk", 3)  # back after 2 steps with probability 1/2
        tensor([[0.0000, 0.5000, 0.2500],
                [0.0000, 0.5000, 0.2500],
                [0.0000, 0.5000, 0.2500]])
    """
    import torch_geometric.transforms as T

    _check_kind(kind)
    check_nonneg_int("dim", dim, minimum=1)
    n = int(data.num_nodes)
    graph = data.clone()
    attr = encoding_attr(kind)
    if kind == "random_walk":
        return getattr(T.AddRandomWalkPE(dim, attr_name=attr)(graph), attr).float()
    k = min(dim, n - 1)  # the non-trivial eigenvectors a graph of n nodes has
    out = torch.zeros(n, dim)
    if k > 0:
        out[:, :k] = getattr(T.AddLaplacianEigenvectorPE(k, attr_name=attr, is_undirected=True)(graph), attr).float()
    return out.to(data.edge_index.device)
