r"""Positional and structural encodings of graphs, computed once per graph with PyG's transforms and cached."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int

Encoding = Literal["none", "laplacian", "random_walk"]

__all__ = ["Encoding", "add_encodings", "encoding_attr", "graph_encoding"]

#: The layout of a cached file of encodings; a new layout gets a new file name.
_FORMAT = 1


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


def _digest(graphs: Sequence[Any], kind: str, dim: int) -> str:
    """A key of the graphs' structure (node counts and edges), the encoding and its width."""
    h = hashlib.md5(f"{kind}-{dim}-{len(graphs)}".encode())
    h.update(torch.tensor([int(g.num_nodes) for g in graphs]).numpy().tobytes())
    h.update(torch.tensor([int(g.edge_index.size(1)) for g in graphs]).numpy().tobytes())
    if graphs:
        h.update(torch.cat([g.edge_index.long().cpu() for g in graphs], dim=1).numpy().tobytes())
    return h.hexdigest()


def add_encodings(
    graphs: Sequence[Any], kind: Encoding, dim: int, cache: bool = True, progress: bool = False
) -> None:
    r"""Store the encoding of every graph on it, under :func:`encoding_attr` (``random_walk_pe`` or
    ``laplacian_pe``, (N, dim) each), computed once by :func:`graph_encoding`: a PyG batch of these
    graphs carries the encodings, so models read them instead of computing them per batch.

    With ``cache`` the encodings are kept in ``$ATTNMM_CACHE/encodings`` (else
    ``~/.cache/attnmm/encodings``) under a name keyed by the graphs' structure (their node counts and
    edges), the encoding and ``dim``, written whole or not at all, and read back without unpickling, so
    a second run over the same graphs computes nothing. ``kind="none"`` does nothing.

    Args:
        graphs (list[Data]): the graphs, changed in place.
        kind (str): ``"random_walk"``, ``"laplacian"`` or ``"none"``.
        dim (int): the encoding's width (walk lengths 1 to ``dim``, or ``dim`` eigenvectors).
        cache (bool, optional): read and write the cache. (default: :obj:`True`)
        progress (bool, optional): show a progress bar while computing. (default: :obj:`False`)

    Examples:
        >>> from attnmm.data import motif_graphs
        >>> graphs = motif_graphs(2, num_nodes=10)
        >>> add_encodings(graphs, "random_walk", 4, cache=False)
        >>> graphs[0].random_walk_pe.shape
        torch.Size([15, 4])
    """
    if kind == "none":
        return
    _check_kind(kind)
    check_nonneg_int("dim", dim, minimum=1)
    attr = encoding_attr(kind)
    path = None
    values: Tensor | None = None
    if cache:
        from attnmm.data._root import cache_dir

        path = cache_dir() / "encodings" / f"{kind}{dim}-v{_FORMAT}-{_digest(graphs, kind, dim)}.pt"
        if path.is_file():
            try:
                values = torch.load(path, weights_only=True)["values"]
            except Exception as err:
                raise RuntimeError(
                    f"could not load the cached encodings {path}: {err}; delete it to compute them again"
                ) from err
    if values is None:
        from tqdm.auto import tqdm

        parts = [graph_encoding(g, kind, dim).cpu() for g in tqdm(graphs, desc=f"{attr}", disable=not progress)]
        values = torch.cat(parts) if parts else torch.zeros(0, dim)
        if path is not None:
            from attnmm.data._staging import save_staged

            save_staged({"values": values}, path)
    sizes = [int(g.num_nodes) for g in graphs]
    if values.shape != (sum(sizes), dim):
        raise RuntimeError(f"the encodings have shape {tuple(values.shape)}, expected ({sum(sizes)}, {dim})")
    for g, part in zip(graphs, values.split(sizes)):
        setattr(g, attr, part)
