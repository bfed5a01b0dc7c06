r"""Peptides-func of the Long Range Graph Benchmark (Dwivedi et al., 2022): molecular graphs from SMILES."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnmm.data._root import DATA_ENV, cache_dir, resolve_root
from attnmm.data._staging import download_staged, save_staged

__all__ = ["PEPTIDES_CSV", "PEPTIDES_NUM_LABELS", "PEPTIDES_SPLIT", "molecule_cardinalities", "peptides_func",
           "read_split"]

#: The raw file, under ``<root>/lrgb/peptides-functional/raw``.
PEPTIDES_CSV = "peptide_multi_class_dataset.csv.gz"
#: The official split, under ``<root>/lrgb/peptides-functional``.
PEPTIDES_SPLIT = "splits_random_stratified_peptide.pickle"
#: Binary function labels per peptide.
PEPTIDES_NUM_LABELS = 10
_URLS = {
    PEPTIDES_CSV: "https://www.dropbox.com/s/ol2v01usvaxbsr8/peptide_multi_class_dataset.csv.gz?dl=1",
    PEPTIDES_SPLIT: "https://www.dropbox.com/s/j4zcnx2eipuo0xz/splits_random_stratified_peptide.pickle?dl=1",
}
#: The layout of the processed file; a new layout gets a new file name.
_FORMAT = 1
#: What the split pickle may rebuild: numpy arrays and their dtypes, nothing else.
_SPLIT_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                  ("numpy", "ndarray"), ("numpy", "dtype")}


def molecule_cardinalities() -> tuple[list[int], list[int]]:
    r"""The number of categories of each atom feature (9 columns) and bond feature (3 columns) of the
    molecular graphs PyG's ``from_smiles`` builds: what an embedding per column needs (an OGB-style
    atom and bond encoder).

    Atom columns: atomic number, chirality, degree, formal charge, hydrogens, radical electrons,
    hybridisation, aromatic, in a ring. Bond columns: bond type, stereo, conjugated.

    Examples:
        >>> atoms, bonds = molecule_cardinalities()
        >>> len(atoms), len(bonds), atoms[0]
        (9, 3, 119)
    """
    from torch_geometric.utils.smiles import e_map, x_map

    return [len(v) for v in x_map.values()], [len(v) for v in e_map.values()]


class _SplitUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SPLIT_GLOBALS:
            raise pickle.UnpicklingError(f"the split file may hold numpy index arrays only, not {module}.{name}")
        if name == "_reconstruct":
            core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
            return core.multiarray._reconstruct
        return getattr(np, name)


def read_split(path: Path, num_items: int) -> dict[str, torch.Tensor]:
    r"""LRGB's split file: a pickled dict of index arrays ``train``, ``val``, ``test``, read without running
    any code it might carry (only numpy arrays are rebuilt) and checked to index ``num_items`` items."""
    try:
        with open(path, "rb") as f:
            raw = _SplitUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise RuntimeError(
            f"could not read the split file {path} ({err}); replace it with LRGB's {PEPTIDES_SPLIT} "
            f"({_URLS[PEPTIDES_SPLIT]})"
        ) from err
    if not isinstance(raw, dict) or not {"train", "val", "test"} <= set(raw):
        raise RuntimeError(f"the split file {path} should map 'train', 'val' and 'test' to index arrays")
    split = {k: torch.as_tensor(np.asarray(raw[k]), dtype=torch.long) for k in ("train", "val", "test")}
    for key, index in split.items():
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= num_items):
            raise RuntimeError(
                f"the {key!r} split of {path} indexes up to {int(index.max())}, but the CSV has {num_items} "
                "peptides: the split and the CSV are from different releases"
            )
    return split


def _folder(root: str | Path | None, download: bool) -> Path:
    folder = resolve_root(root, "lrgb/peptides-functional")
    files = {PEPTIDES_CSV: folder / "raw" / PEPTIDES_CSV, PEPTIDES_SPLIT: folder / PEPTIDES_SPLIT}
    missing = {n: p for n, p in files.items() if not p.is_file() or p.stat().st_size == 0}
    put = (
        f"put LRGB's raw/{PEPTIDES_CSV} and {PEPTIDES_SPLIT} into {folder} (from {_URLS[PEPTIDES_CSV]} and "
        f"{_URLS[PEPTIDES_SPLIT]}), point root= or ${DATA_ENV} at a folder holding lrgb/peptides-functional"
    )
    if missing and download:
        from torch_geometric.data import download_url

        def fetch(at: Path) -> None:
            for n, p in missing.items():
                download_url(_URLS[n], str(at / p.parent.relative_to(folder)))

        download_staged(folder, fetch, Path(), "Peptides-func", put)  # a failed download leaves no folder
        missing = {}
    if missing:
        raise FileNotFoundError(
            f"Peptides-func not found: {', '.join(str(p) for p in missing.values())} missing or empty; {put}, "
            "or pass download=True."
        )
    return folder


def _read_rows(csv_bytes: bytes, path: Path) -> list[tuple[str, list[float]]]:
    text = gzip.decompress(csv_bytes).decode("utf-8")
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or not {"smiles", "labels"} <= set(reader.fieldnames):
        raise RuntimeError(f"{path} should have the columns smiles and labels, has {reader.fieldnames}")
    rows = []
    for i, row in enumerate(reader):
        labels = json.loads(row["labels"])
        if len(labels) != PEPTIDES_NUM_LABELS:
            raise RuntimeError(f"row {i} of {path} has {len(labels)} labels, expected {PEPTIDES_NUM_LABELS}")
        rows.append((row["smiles"], [float(v) for v in labels]))
    return rows


def _build(rows: list[tuple[str, list[float]]], path: Path, progress: bool) -> dict[str, torch.Tensor]:
    """Molecular graphs of every SMILES, concatenated: node and edge features as uint8, local edge indices,
    and the offsets of each graph's nodes and edges."""
    from torch_geometric.utils import from_smiles
    from tqdm.auto import tqdm

    xs, edges, edge_attrs, nodes, num_edges = [], [], [], [], []
    bar = tqdm(rows, desc="Peptides-func: SMILES to graphs", unit="mol", disable=not progress)
    for i, (smiles, _) in enumerate(bar):
        g = from_smiles(smiles)
        if g.num_nodes == 0:
            raise RuntimeError(f"RDKit cannot parse the SMILES of row {i} of {path}: {smiles[:80]!r}")
        xs.append(g.x)
        edges.append(g.edge_index)
        edge_attrs.append(g.edge_attr)
        nodes.append(g.num_nodes)
        num_edges.append(g.edge_index.size(1))
    zero = torch.zeros(1, dtype=torch.long)
    return {
        "x": torch.cat(xs).to(torch.uint8),  # (N, 9), every category < 256
        "edge_index": torch.cat(edges, dim=1).to(torch.int32),  # (2, M), within each graph
        "edge_attr": torch.cat(edge_attrs).to(torch.uint8),  # (M, 3)
        "y": torch.tensor([labels for _, labels in rows], dtype=torch.float),  # (G, 10)
        "node_ptr": torch.cat([zero, torch.tensor(nodes).cumsum(0)]),  # (G + 1,)
        "edge_ptr": torch.cat([zero, torch.tensor(num_edges).cumsum(0)]),  # (G + 1,)
    }


def _require_rdkit() -> None:
    try:
        import rdkit  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "building the Peptides-func graphs from SMILES needs RDKit: pip install attnmm[chem] (or pip install "
            "rdkit); the graphs are built once and cached"
        ) from err


def peptides_func(
    root: str | Path | None = None, download: bool = False, progress: bool = True
) -> tuple[list[Any], dict[str, torch.Tensor]]:
    r"""LRGB's Peptides-func: 15,535 peptides as molecular graphs, each with 10 binary function labels, and
    the official split (10,873 / 2,331 / 2,331).

    Reads ``<root>/lrgb/peptides-functional/raw/peptide_multi_class_dataset.csv.gz`` (the SMILES and
    labels) and ``<root>/lrgb/peptides-functional/splits_random_stratified_peptide.pickle`` (``root``
    resolved by :func:`~attnmm.data.resolve_root`). Each SMILES becomes a graph with RDKit through
    PyG's ``from_smiles``: atoms are nodes with 9 categorical features, bonds are edges (both directions)
    with 3 categorical features, the kind of graph OGB's ``smiles2graph`` builds for LRGB (the category
    counts are :func:`molecule_cardinalities`). Built once (about 45 s, with a progress bar) and cached in
    ``$ATTNMM_CACHE/lrgb/peptides-functional/processed`` under a name keyed by the CSV's content; a
    built file is written whole or not at all and is read back without unpickling. Needs RDKit only to
    build (``pip install attnmm[chem]``).

    Args:
        root (str or Path, optional): the base data folder holding ``lrgb/``. (default: :obj:`None`)
        download (bool, optional): fetch missing files from LRGB's release. (default: :obj:`False`)
        progress (bool, optional): show a progress bar while building. (default: :obj:`True`)

    Returns:
        tuple[list[Data], dict[str, LongTensor]]: the graphs (``x`` (N, 9) and ``edge_attr`` (M, 3) long
        categories, ``y`` (1, 10) float 0/1), and the indices of the ``train``, ``val`` and ``test`` graphs.
    """
    from torch_geometric.data import Data

    folder = _folder(root, download)
    csv_path = folder / "raw" / PEPTIDES_CSV
    csv_bytes = csv_path.read_bytes()
    digest = hashlib.md5(csv_bytes).hexdigest()
    processed = cache_dir() / "lrgb" / "peptides-functional" / "processed" / f"peptides_func-v{_FORMAT}-{digest}.pt"
    if processed.is_file():
        try:
            tensors = torch.load(processed, weights_only=True)
        except Exception as err:
            raise RuntimeError(
                f"could not load the processed Peptides-func {processed}: {err}; delete it to build it again"
            ) from err
    else:
        _require_rdkit()
        tensors = _build(_read_rows(csv_bytes, csv_path), csv_path, progress)
        save_staged(tensors, processed)
    node_ptr, edge_ptr = tensors["node_ptr"].tolist(), tensors["edge_ptr"].tolist()
    # categories as long (what embeddings take), each graph a view into the whole
    x, edge_index, edge_attr = (tensors[k].long() for k in ("x", "edge_index", "edge_attr"))
    y = tensors["y"]
    graphs = [
        Data(x=x[a:b], edge_index=edge_index[:, c:d], edge_attr=edge_attr[c:d], y=y[i : i + 1])
        for i, (a, b, c, d) in enumerate(zip(node_ptr, node_ptr[1:], edge_ptr, edge_ptr[1:]))
    ]
    return graphs, read_split(folder / PEPTIDES_SPLIT, len(graphs))
