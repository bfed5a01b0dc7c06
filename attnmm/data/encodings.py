r"""The encodings of a dataset's graphs, computed once per graph (:func:`~attnmm.common.encodings.graph_encoding`)
and cached on disk."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.common.encodings import Encoding, _check_kind, encoding_attr, graph_encoding
from attnmm.data._root import cache_dir
from attnmm.data._staging import save_staged

__all__ = ["Encoding", "add_encodings", "encoding_attr", "graph_encoding"]

#: The layout of a cached file of encodings; a new layout gets a new file name.
_FORMAT = 1


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
            save_staged({"values": values}, path)
    sizes = [int(g.num_nodes) for g in graphs]
    if values.shape != (sum(sizes), dim):
        raise RuntimeError(f"the encodings have shape {tuple(values.shape)}, expected ({sum(sizes)}, {dim})")
    for g, part in zip(graphs, values.split(sizes)):
        setattr(g, attr, part)
