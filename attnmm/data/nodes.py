r"""Node classification on one graph: the Planetoid citation graphs (Cora, CiteSeer, PubMed) and Actor."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader

from attnmm._checks import check_nonneg_int
from attnmm.common.feature_knn import feature_knn
from attnmm.data._resumable import SplitLoaders
from attnmm.data._root import DATA_ENV, resolve_root, writable_copy
from attnmm.data._staging import download_staged, load_processed

#: The Planetoid citation graphs.
PLANETOID_NAMES = ("Cora", "CiteSeer", "PubMed")
#: Every graph :class:`NodeDataModule` reads.
NODE_NAMES = (*PLANETOID_NAMES, "Actor")
#: The raw parts of every Planetoid graph, files ``ind.<name>.<part>``.
RAW_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
#: How many splits geom-gcn publishes per graph (``<name>_split_0.6_0.2_<i>.npz``).
NUM_GEOM_GCN_SPLITS = 10
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid (folder data/)"
_GEOM_GCN_URL = "https://github.com/graphdml-uiuc-jlu/geom-gcn"
_GEOM_GCN = f" and <name>_split_0.6_0.2_<i>.npz from {_GEOM_GCN_URL} (folder splits/)"

__all__ = ["NODE_NAMES", "NUM_GEOM_GCN_SPLITS", "NodeDataModule", "PLANETOID_NAMES", "RAW_PARTS"]


class NodeDataModule(SplitLoaders):
    r"""Node classification on one graph, seen whole in every step: a Planetoid citation graph (Cora,
    CiteSeer, PubMed; Yang et al., 2016) or Actor (the film actors' co-occurrence graph of Geom-GCN,
    Pei et al., 2020, a heterophilous graph: neighbours mostly differ in class). The split is given
    by the graph's ``train_mask``, ``val_mask`` and ``test_mask``, which
    :class:`~attnmm.lightning.ClassificationTask` applies per stage. Targets are ``y``.

    Splits: Planetoid graphs take PyG's ``"public"`` split (Planetoid's 20 per class / 500 / 1000),
    ``"full"`` or ``"geom-gcn"``; Actor has geom-gcn's ten published splits only (3,648 / 2,432 / 1,520
    nodes, the splits every published Actor result uses; ``split`` ``"public"`` or ``"geom-gcn"``, both
    meaning these). Of geom-gcn's ten splits, ``split_index`` picks one (as the files number them).

    Edges are used as PyG reads them: the Planetoid graphs are undirected (both directions stored);
    Actor's 30,019 edges are directed, as Geom-GCN's file lists them and as published Actor results
    mostly use them (the graph recipe's adapter adds self loops). ``to_undirected=True`` adds the
    reverse of every edge (Actor: 53,411 edges). ``feature_neighbors=k`` adds, as in-edges of every
    node, its k most similar nodes by the cosine similarity of their features
    (:func:`~attnmm.common.feature_knn.feature_knn`, computed once in :meth:`setup`): on a heterophilous
    graph the nodes that look alike are often better company than the neighbours.

    Raw files are read from ``<root>/planetoid/<name>/raw`` (geom-gcn split files:
    ``<root>/planetoid/<name>/geom-gcn/raw``) and ``<root>/actor/raw`` (:func:`~attnmm.data.resolve_root`),
    a read-only folder first copied to the writable cache (:func:`~attnmm.data.writable_copy`) since PyG
    writes ``processed/`` next to them; ``download=True`` lets PyG fetch missing files. A missing, empty
    or unreadable raw file is named in the error, and nothing half-processed is left in the cache.

    Args:
        root (str or Path, optional): the base data folder holding ``planetoid/`` or ``actor/``.
            (default: :obj:`None`)
        name (str, optional): ``"Cora"``, ``"CiteSeer"``, ``"PubMed"`` or ``"Actor"``. (default: :obj:`"Cora"`)
        split (str, optional): ``"public"``, ``"full"`` or ``"geom-gcn"`` (see above). (default: :obj:`"public"`)
        normalize_features (bool, optional): row-normalise the features (bag of words for Planetoid,
            binary keywords for Actor). (default: :obj:`True`)
        download (bool, optional): let PyG download missing raw files. (default: :obj:`False`)
        num_neighbors (list[int], optional): instead of the full batch, mini-batches of
            ``batch_size`` seed nodes with this many neighbours sampled per node and hop, as PyG's
            ``NeighborLoader`` does (:func:`~attnmm.data.neighbors.neighbor_loader`); validation and
            testing take every neighbour over as many hops. For graphs too large for one batch.
            (default: :obj:`None`)
        batch_size (int, optional): seed nodes per mini-batch with ``num_neighbors``. (default: :obj:`256`)
        split_index (int, optional): which of geom-gcn's ten splits, 0 to 9 (Actor, or ``split="geom-gcn"``).
            (default: :obj:`0`)
        to_undirected (bool, optional): add the reverse of every edge. (default: :obj:`False`)
        feature_neighbors (int, optional): add each node's k nearest nodes by feature cosine
            similarity as in-edges (after ``to_undirected``); 0 for none. (default: :obj:`0`)

    Examples:
        >>> NodeDataModule(root="/data", name="Actor", split_index=3)
        NodeDataModule(name='Actor', root='/data/actor', split='geom-gcn', split_index=3)
    """

    #: The graphs this class reads.
    names: tuple[str, ...] = NODE_NAMES
    #: One class per node (what the recipes link :class:`~attnmm.lightning.ClassificationTask`'s ``task`` to).
    task: Literal["multiclass", "multilabel"] = "multiclass"

    def __init__(
        self, root: str | Path | None = None, name: str = "Cora",
        split: Literal["public", "full", "geom-gcn"] = "public", normalize_features: bool = True,
        download: bool = False, num_neighbors: list[int] | None = None, batch_size: int = 256, split_index: int = 0,
        to_undirected: bool = False, feature_neighbors: int = 0,
    ) -> None:
        super().__init__()
        if name not in self.names:
            hint = f" (Actor: use {NodeDataModule.__name__})" if name in NODE_NAMES else ""
            raise ValueError(f"name must be one of {', '.join(self.names)}, got {name!r}{hint}")
        if split not in ("public", "full", "geom-gcn"):
            raise ValueError(f"split must be 'public', 'full' or 'geom-gcn', got {split!r}")
        if name == "Actor" and split == "full":
            raise ValueError(
                "Actor has geom-gcn's ten splits only: leave split at 'public' (or 'geom-gcn') and pick one of "
                "them with split_index; split='full' is a Planetoid split"
            )
        check_nonneg_int("split_index", split_index)
        if split_index >= NUM_GEOM_GCN_SPLITS:
            raise ValueError(
                f"split_index picks one of geom-gcn's {NUM_GEOM_GCN_SPLITS} splits (0 to 9), got {split_index}"
            )
        if split_index and name != "Actor" and split != "geom-gcn":
            raise ValueError(
                f"split_index picks one of geom-gcn's ten splits, but {name}'s {split!r} split is one split: "
                "leave split_index at 0, or pass split='geom-gcn'"
            )
        self.name: str = name
        self.root, self.split, self.split_index = root, split, split_index
        self.normalize_features, self.download, self.to_undirected = normalize_features, download, to_undirected
        self.feature_neighbors = check_nonneg_int("feature_neighbors", feature_neighbors)
        self.num_neighbors, self.batch_size = num_neighbors, batch_size
        self.data: Any = None
        self._sizes = (0, 0)

    @property
    def _geom_gcn(self) -> bool:
        return self.name == "Actor" or self.split == "geom-gcn"

    @property
    def _title(self) -> str:
        return self.name if self.name == "Actor" else f"Planetoid {self.name}"

    @property
    def _own(self) -> str:
        """The graph's folder under the base data folder, and of its copy under the cache."""
        return "actor" if self.name == "Actor" else f"planetoid/{self.name}"

    def _pyg_root(self, own: Path) -> Path:
        """The root PyG reads, from the graph's own folder: ``planetoid/`` holds one folder per graph."""
        return own if self.name == "Actor" else own.parent

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/planetoid`` (``<root>/actor`` for Actor)."""
        return self._pyg_root(resolve_root(self.root, self._own))

    @property
    def _subdir(self) -> Path:
        """Where PyG keeps ``raw/`` and ``processed/`` under :attr:`dataset_dir` for this graph and split."""
        if self.name == "Actor":
            return Path()
        return Path(self.name, "geom-gcn") if self.split == "geom-gcn" else Path(self.name)

    def raw_file_names(self) -> list[str]:
        r"""The raw files this graph and split need in ``raw/``: Planetoid's eight ``ind.<name>.*`` files,
        and for ``"geom-gcn"`` its ten split files; for Actor, Geom-GCN's features-and-labels and edge
        files and its ten ``film_split_*`` files."""
        if self.name == "Actor":
            names = ["out1_node_feature_label.txt", "out1_graph_edges.txt"]
            return names + [f"film_split_0.6_0.2_{i}.npz" for i in range(NUM_GEOM_GCN_SPLITS)]
        names = [f"ind.{self.name.lower()}.{part}" for part in RAW_PARTS]
        if self.split == "geom-gcn":
            names += [f"{self.name.lower()}_split_0.6_0.2_{i}.npz" for i in range(NUM_GEOM_GCN_SPLITS)]
        return names

    def _missing(self, raw: Path) -> list[str]:
        return [n for n in self.raw_file_names() if not (raw / n).is_file() or (raw / n).stat().st_size == 0]

    def _where(self) -> str:
        """Where the raw files come from."""
        if self.name == "Actor":
            return f"from {_GEOM_GCN_URL} (folders new_data/film/ and splits/)"
        return f"from {_PLANETOID_URL}{_GEOM_GCN if self.split == 'geom-gcn' else ''}"

    def _writable_root(self) -> Path:
        raw = self.dataset_dir / self._subdir / "raw"
        missing = self._missing(raw)
        if not missing:
            copy = writable_copy(resolve_root(self.root, self._own), self._own)
            stale = self._missing(self._pyg_root(copy) / self._subdir / "raw")
            if stale:
                raise FileNotFoundError(
                    f"the cached copy {copy} of {self._title} lacks {', '.join(stale)} (it was copied from an "
                    f"incomplete folder); delete {copy} to copy the complete {raw} again"
                )
            return self._pyg_root(copy)
        folder = "actor/raw" if self.name == "Actor" else f"planetoid/{self._subdir.as_posix()}/raw"
        put = f"point root= or ${DATA_ENV} at a folder holding {folder}"
        if self.download:  # PyG fetches every raw file (into a staging folder: a failed download keeps nothing)
            instead = f"put its raw files {self._where()} into {raw} yourself, or {put}"
            download_staged(raw, self._pyg, self._subdir / "raw", self._title, instead)
            return self.dataset_dir
        if len(missing) == len(self.raw_file_names()):
            if self.name == "Actor":
                files = f"out1_node_feature_label.txt, out1_graph_edges.txt, film_split_0.6_0.2_<i>.npz {self._where()}"
            else:
                files = f"ind.{self.name.lower()}.* (x, tx, allx, y, ty, ally, graph, test.index {self._where()})"
            raise FileNotFoundError(
                f"{self._title} not found: no raw files in {raw}. Put the files {files} there, {put}, "
                "or pass download=True."
            )
        raise FileNotFoundError(
            f"{self._title} is incomplete: {raw} lacks {', '.join(missing)} (missing or empty). Copy them there "
            f"{self._where()}, or pass download=True to fetch every raw file; nothing was copied to the cache."
        )

    def _pyg(self, root: Path, transform: Any = None) -> Any:
        """PyG's dataset of this graph under ``root`` (processing the raw files if ``processed/`` is not there)."""
        from torch_geometric.datasets import Actor, Planetoid

        if self.name == "Actor":
            return Actor(str(root), transform=transform)
        return Planetoid(str(root), self.name, split=self.split, transform=transform)

    def _dataset(self) -> Any:
        import torch_geometric.transforms as T

        root = self._writable_root()
        steps = [T.NormalizeFeatures()] if self.normalize_features else []
        steps += [T.ToUndirected()] if self.to_undirected else []
        transform = T.Compose(steps) if steps else None
        return load_processed(
            root, self._subdir, self._pyg, lambda err: self._unreadable(root / self._subdir / "raw", err), self.name,
            lambda: self._pyg(root, transform), self._title,
        )

    def _unreadable(self, raw: Path, err: Exception) -> Exception:
        """The error for raw files PyG could not process, naming the first Planetoid file that cannot be read."""
        source = self.dataset_dir / self._subdir / "raw"
        if self.name == "Actor":
            return RuntimeError(
                f"could not process the Actor raw files in {raw} ({type(err).__name__}: {err}); replace them with "
                f"intact copies {self._where()} (nothing was written to processed/)"
            )
        from torch_geometric.io.planetoid import read_file

        for part in RAW_PARTS:
            name = f"ind.{self.name.lower()}.{part}"
            try:
                read_file(str(raw), self.name, part)
            except Exception as cause:
                copied = ""
                if raw.resolve() != source.resolve():  # the cache copy: the original is corrupt too
                    copied = (
                        f" It was copied from {source / name}: replace that one as well, or replace only it and "
                        f"delete the cached copy {raw.parent} so that it is copied again."
                    )
                return RuntimeError(
                    f"Planetoid raw file {raw / name} is corrupt or truncated ({type(cause).__name__}: {cause}); "
                    f"replace it with an intact copy from {_PLANETOID_URL} and "
                    f"run again (nothing was written to processed/).{copied}"
                )
        return RuntimeError(
            f"could not process the Planetoid {self.name} raw files in {raw} ({type(err).__name__}: {err}); they "
            f"do not fit together (from different releases?): replace them with one intact set from "
            f"{_PLANETOID_URL} (nothing was written to processed/)"
        )

    def prepare_data(self) -> None:
        self._dataset()

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            dataset = self._dataset()
            data = dataset[0]
            if self._geom_gcn:  # geom-gcn's ten splits are the columns of each mask (N, 10): keep one
                for key in ("train_mask", "val_mask", "test_mask"):
                    data[key] = data[key][:, self.split_index].contiguous()
            if self.feature_neighbors:
                knn = feature_knn(data.x, self.feature_neighbors).edge_index
                data.edge_index = torch.unique(torch.cat([data.edge_index, knn], 1), dim=1)
            self.data = data
            self._sizes = (dataset.num_features, dataset.num_classes)

    @property
    def num_features(self) -> int:
        """Node features per node (1433 for Cora, 932 for Actor), read on first use (a config link can ask it)."""
        self.setup()
        return self._sizes[0]

    @property
    def num_classes(self) -> int:
        """Node classes (7 for Cora, 5 for Actor), read on first use."""
        self.setup()
        return self._sizes[1]

    def _loader(self, stage: str | None = None, train: bool = False) -> DataLoader:
        if self.num_neighbors is None or stage is None:
            one: Any = [self.data]  # a list is a map-style dataset (torch's annotation says Dataset)
            return DataLoader(one, batch_size=1, collate_fn=operator.itemgetter(0))
        from attnmm.data.neighbors import neighbor_loader

        hops = self.num_neighbors if train else [-1] * len(self.num_neighbors)
        return neighbor_loader(self.data, stage, hops, self.batch_size, shuffle=train)

    def predict_dataloader(self) -> DataLoader:
        return self._loader()

    def __repr__(self) -> str:
        split = "geom-gcn" if self._geom_gcn else self.split
        extra = f", split_index={self.split_index}" if self._geom_gcn else ""
        extra += ", to_undirected=True" if self.to_undirected else ""
        extra += f", feature_neighbors={self.feature_neighbors}" if self.feature_neighbors else ""
        root = self.dataset_dir.as_posix()
        return f"{type(self).__name__}(name={self.name!r}, root={root!r}, split={split!r}{extra})"
