r"""Graph classification sets of the TU collection (Morris et al., 2020), read from their text files."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attnmm._checks import check_nonneg_int
from attnmm.data._root import DATA_ENV, resolve_root, writable_copy
from attnmm.data._staging import download_staged, load_processed

__all__ = ["TU_URL", "degree_features", "tu_graphs"]

#: Where the TU collection publishes ``<name>.zip`` (what PyG downloads with ``download=True``).
TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets"
_REQUIRED = ("A", "graph_indicator", "graph_labels")


def degree_features(edge_index: torch.Tensor, num_nodes: int, max_degree: int) -> torch.Tensor:
    r"""One-hot in-degree of each node, degrees above ``max_degree`` sharing the last column: the node
    features of graphs that come without any (the social sets of the TU collection).

    Args:
        edge_index (LongTensor): edges (2, M) (both directions stored for an undirected graph).
        num_nodes (int): number of nodes N.
        max_degree (int): the largest degree with a column of its own.

    Returns:
        Tensor: float features (N, max_degree + 1).

    Examples:
        >>> degree_features(torch.tensor([[1, 2, 0, 0], [0, 0, 1, 2]]), 4, max_degree=1).tolist()
        [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]
    """
    deg = torch.bincount(edge_index[1], minlength=num_nodes)
    return F.one_hot(deg.clamp(max=max_degree), max_degree + 1).float()


def _files(raw: Path, name: str) -> list[str]:
    """The required TU files missing (or empty) in ``raw``."""
    names = [f"{name}_{part}.txt" for part in _REQUIRED]
    return [n for n in names if not (raw / n).is_file() or (raw / n).stat().st_size == 0]


def _writable_root(base: Path, name: str, download: bool) -> Path:
    """The folder holding ``<name>/raw`` that PyG may write ``<name>/processed`` into."""
    raw = base / name / "raw"
    missing = _files(raw, name)
    if not missing:
        copy = writable_copy(base / name, f"TUDataset/{name}")
        stale = _files(copy / "raw", name)
        if stale:
            raise FileNotFoundError(
                f"the cached copy {copy} of TU {name} lacks {', '.join(stale)} (it was copied from an incomplete "
                f"folder); delete {copy} to copy the complete {raw} again"
            )
        return copy.parent
    put = f"point root= or ${DATA_ENV} at a folder holding TUDataset/{name}/raw"
    if download:  # PyG fetches <name>.zip (into a staging folder: a failed download keeps nothing)
        from torch_geometric.datasets import TUDataset

        what, instead = f"TU dataset {name!r} from {TU_URL}/{name}.zip", f"put its files into {raw} yourself, or {put}"
        download_staged(raw, lambda at: TUDataset(str(at), name), Path(name, "raw"), what, instead)
        return base
    what = "no TU files" if len(missing) == len(_REQUIRED) else f"not {', '.join(missing)} (missing or empty)"
    raise FileNotFoundError(
        f"TU dataset {name!r} not found: {raw} holds {what}. Put the TU text files {name}_A.txt, "
        f"{name}_graph_indicator.txt, {name}_graph_labels.txt (and {name}_node_labels.txt, _node_attributes.txt, "
        f"_edge_labels.txt where the dataset has them; from {TU_URL}/{name}.zip) there, {put}, "
        "or pass download=True. (Other names: 'motifs' "
        "for generated graphs, 'peptides-func' for LRGB's peptides; TU names are case-sensitive, e.g. 'PROTEINS'.)"
    )


def _unreadable(raw: Path, name: str, err: Exception) -> Exception:
    return RuntimeError(
        f"could not read the TU dataset {name} from {raw} ({type(err).__name__}: {err}); replace the files with "
        f"an intact set from {TU_URL}/{name}.zip (nothing was written to processed/)"
    )


def tu_graphs(
    name: str, root: str | Path | None = None, use_node_attr: bool = False, max_degree: int = 64,
    download: bool = False,
) -> list[Any]:
    r"""The graphs of TU dataset ``name`` as a list of PyG ``Data`` with ``x``, ``edge_index``, ``y`` (1,) and,
    where the files have edge labels or attributes, ``edge_attr``.

    Read by PyG's ``TUDataset`` from ``<root>/TUDataset/<name>/raw`` (``root`` resolved by
    :func:`~attnmm.data.resolve_root`), processed once in a writable copy (``$ATTNMM_CACHE``) through a
    staging folder, so a failed run leaves nothing behind. Node features: the one-hot node labels,
    after the node attributes with ``use_node_attr=True`` (PyG's ``use_node_attr``); where that leaves
    no feature (no node labels; no attributes, or not used) :func:`degree_features` (one-hot in-degree,
    capped at ``max_degree``). Edge features: the edge attributes and one-hot edge labels the files
    have. Graph labels are renumbered 0 to C - 1.

    Args:
        name (str): the dataset, as the TU collection spells it (e.g. ``"PROTEINS"``, ``"MUTAG"``).
        root (str or Path, optional): the base data folder holding ``TUDataset/``. (default: :obj:`None`)
        use_node_attr (bool, optional): add the continuous node attributes. (default: :obj:`False`)
        max_degree (int, optional): the degree cap of :func:`degree_features`. (default: :obj:`64`)
        download (bool, optional): let PyG download missing files from the TU collection. (default: :obj:`False`)

    Returns:
        list[Data]: the graphs, in the files' order.
    """
    from torch_geometric.datasets import TUDataset

    check_nonneg_int("max_degree", max_degree, minimum=1)
    base = resolve_root(root, "TUDataset")
    pyg_root = _writable_root(base, name, download)
    dataset = load_processed(
        pyg_root, Path(name), lambda at: TUDataset(str(at), name), partial(_unreadable, pyg_root / name / "raw", name),
        name, lambda: TUDataset(str(pyg_root), name, use_node_attr=use_node_attr, use_edge_attr=True),
        f"TU dataset {name}",
    )
    if dataset.y is None or dataset.y.is_floating_point():
        raise ValueError(
            f"TU dataset {name} has graph attributes (regression targets) or no graph labels; graph "
            "classification needs class labels (<name>_graph_labels.txt and no _graph_attributes.txt)"
        )
    graphs = [dataset[i] for i in range(len(dataset))]
    if dataset.num_node_features == 0:  # neither node labels nor (kept) attributes
        for g in graphs:
            g.x = degree_features(g.edge_index, int(g.num_nodes), max_degree)
    return graphs
