r"""Graph classification data: generated motif graphs, the TU sets and LRGB's Peptides-func, behind one
DataModule whose ``name`` picks the data."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from attnmm._checks import check_nonneg_int
from attnmm.data._resumable import ResumableDataLoader, SplitLoaders
from attnmm.data.encodings import Encoding, add_encodings
from attnmm.data.folds import stratified_folds, stratified_holdout
from attnmm.data.peptides import PEPTIDES_NUM_LABELS, molecule_cardinalities, peptides_func
from attnmm.data.tu import tu_graphs

__all__ = ["GraphDataModule", "MotifGraphsDataModule", "motif_graphs"]


def motif_graphs(num_graphs: int, num_nodes: int = 20, seed: int = 0) -> list[Any]:
    r"""Barabási-Albert graphs with one motif attached each, labelled by the motif: 0 for a house
    (a square with a roof, 5 nodes), 1 for a 5-cycle, alternating. Both motifs have 5 nodes and
    nearly the same degrees, so telling them apart takes structure (a triangle in the house), the
    task of the BA-2Motifs benchmark (Luo et al., 2020). Generated with PyG's ``ExplainerDataset``;
    node features are ones.

    Args:
        num_graphs (int): number of graphs.
        num_nodes (int, optional): nodes of each Barabási-Albert base graph. (default: :obj:`20`)
        seed (int, optional): random seed; the same arguments give the same graphs. (default: :obj:`0`)

    Examples:
        >>> graphs = motif_graphs(4, num_nodes=10)
        >>> [int(g.y) for g in graphs], graphs[0].num_nodes
        ([0, 1, 0, 1], 15)
    """
    import warnings

    from torch_geometric.data import Data
    from torch_geometric.datasets import ExplainerDataset
    from torch_geometric.datasets.graph_generator import BAGraph
    from torch_geometric.datasets.motif_generator import CycleMotif, HouseMotif

    check_nonneg_int("num_graphs", num_graphs)
    state, np_state = torch.random.get_rng_state(), np.random.get_state()
    torch.manual_seed(seed)
    np.random.seed(seed)  # PyG's Barabasi-Albert generator draws from numpy too
    try:
        out = []
        for label, motif in enumerate((HouseMotif(), CycleMotif(5))):
            count = (num_graphs + 1 - label) // 2
            if count == 0:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = ExplainerDataset(BAGraph(num_nodes=num_nodes, num_edges=1), motif, num_motifs=1, num_graphs=count)
            out.append(
                [Data(x=torch.ones(g.num_nodes, 1), edge_index=g.edge_index, y=torch.tensor([label])) for g in ds]
            )
    finally:
        torch.random.set_rng_state(state)
        np.random.set_state(np_state)
    houses, cycles = [*out, [], []][:2]
    return [g for pair in zip(houses, [*cycles, None]) for g in pair if g is not None][:num_graphs]


#: Names of the data that is not a TU dataset; every other name is read as one.
MOTIFS, PEPTIDES = "motifs", "peptides-func"
#: The options each kind of data reads (besides ``name``, ``root``, ``download`` and ``batch_size``); the
#: others must keep their defaults.
_OPTIONS = {
    "motifs": ("num_graphs", "num_nodes", "val_fraction", "test_fraction", "seed"),
    "tu": ("fold", "num_folds", "fold_seed", "val_fraction", "use_node_attr", "max_degree"),
    "peptides": (),
}
_STAGES = ("train", "val", "test")


class GraphDataModule(SplitLoaders):
    r"""Graph classification: batches of whole graphs (PyG ``Batch``) with graph targets ``y``, the data
    picked by ``name``, each under the protocol its field compares on.

    - ``"motifs"`` (default): :func:`motif_graphs` (house vs 5-cycle motif on a random base graph),
      generated in :meth:`setup` from ``seed``, nothing to download; fixed fractions of the graphs
      (``val_fraction``, ``test_fraction``) validate and test. 2 classes, one feature (ones).
    - a TU dataset (any other name, e.g. ``"PROTEINS"``, ``"MUTAG"``, ``"NCI1"``): read by
      :func:`~attnmm.data.tu.tu_graphs` from ``<root>/TUDataset/<name>/raw`` (the TU text files).
      Node features: the one-hot node labels (PROTEINS 3, MUTAG 7, NCI1 37 columns, as Errica et
      al. use them), after the continuous node attributes with ``use_node_attr=True`` (PROTEINS' one
      attribute is unscaled, -538 to 798); a set whose features come out empty (no node labels, and
      no attributes or ``use_node_attr=False``) gets one-hot degrees capped at ``max_degree``
      (:func:`~attnmm.data.tu.degree_features`). Edge features: the one-hot edge labels (MUTAG 4).
      Protocol of Errica et al. (ICLR 2020): stratified ``num_folds``-fold cross-validation,
      ``fold`` the test fold; of the other graphs a stratified ``val_fraction`` validates (model
      selection) and the rest trains. Folds and the validation
      draw come from ``fold_seed`` alone (:func:`~attnmm.data.folds.stratified_folds`,
      :func:`~attnmm.data.folds.stratified_holdout`), never from the training seed.
    - ``"peptides-func"``: LRGB's Peptides-func (:func:`~attnmm.data.peptides.peptides_func`), 10
      binary function labels per peptide (``task="multilabel"``, ``y`` (B, 10) float), the official
      split (10,873 / 2,331 / 2,331). Node and edge features are categories (``x`` (N, 9) and
      ``edge_attr`` (M, 3) long), their counts per column in :attr:`feature_cardinalities` and
      :attr:`edge_feature_cardinalities`. Built once from the SMILES with RDKit (``pip install
      attnmm[chem]``) and cached.

    ``pe`` computes a positional or structural encoding of every graph once, in :meth:`setup`
    (:func:`~attnmm.data.encodings.add_encodings`), so batches carry it and a
    :class:`~attnmm.adapters.GraphAdapter` with the same ``pe`` reads it instead of computing it per
    batch (``graph_graph.py`` links the two, so a config names them once).

    Options of another kind of data must keep their defaults (an error names any that do not). The
    model's sizes come from the data (:attr:`num_features`, :attr:`num_edge_features`,
    :attr:`num_classes`, :attr:`task`, the cardinalities), read by the recipes' links before the model
    is built. Training batches are resumable mid-epoch (:class:`~attnmm.data._resumable.ResumableDataLoader`).

    Args:
        name (str, optional): ``"motifs"``, ``"peptides-func"`` or a TU dataset's name. (default: :obj:`"motifs"`)
        root (str or Path, optional): the base data folder holding ``TUDataset/`` or ``lrgb/``, else
            ``$ATTNMM_DATA``, else ``~/.cache/attnmm`` (motifs read no files). (default: :obj:`None`)
        batch_size (int, optional): graphs per batch. (default: :obj:`32`)
        num_graphs (int, optional): motifs: number of graphs. (default: :obj:`1000`)
        num_nodes (int, optional): motifs: nodes of each base graph. (default: :obj:`20`)
        val_fraction (float, optional): motifs: share of all graphs for validation; TU: share of the
            fold's training graphs held out for validation. (default: :obj:`0.1`)
        test_fraction (float, optional): motifs: share of graphs for testing. (default: :obj:`0.1`)
        seed (int, optional): motifs: seed of the graphs and of their split. (default: :obj:`0`)
        fold (int, optional): TU: the test fold, 0 to ``num_folds - 1``. (default: :obj:`0`)
        num_folds (int, optional): TU: number of cross-validation folds. (default: :obj:`10`)
        fold_seed (int, optional): TU: seed of the fold assignment and of the validation draw.
            (default: :obj:`0`)
        use_node_attr (bool, optional): TU: add the continuous node attributes to the node labels
            (PyG's ``use_node_attr``). (default: :obj:`False`)
        max_degree (int, optional): TU sets without node features: the cap of the one-hot degree.
            (default: :obj:`64`)
        download (bool, optional): fetch missing files (TU: from the TU collection by PyG;
            peptides: LRGB's release). (default: :obj:`False`)
        pe (str, optional): the encoding computed once per graph: ``"none"``, ``"random_walk"`` or
            ``"laplacian"``. (default: :obj:`"none"`)
        pe_dim (int, optional): its width: random-walk steps or eigenvectors. (default: :obj:`8`)

    Examples:
        >>> dm = GraphDataModule(num_graphs=20, batch_size=4)
        >>> dm.setup()
        >>> dm
        GraphDataModule(name='motifs', train=16, val=2, test=2)
        >>> batch = next(iter(dm.train_dataloader()))
        >>> batch.num_graphs, batch.y.shape, dm.num_features, dm.num_classes, dm.task
        (4, torch.Size([4]), 1, 2, 'multiclass')
        >>> GraphDataModule(name="PROTEINS", fold=3)  # 10-fold cross-validation, read in setup()
        GraphDataModule(name='PROTEINS', fold=3/10, fold_seed=0, not set up)
    """

    def __init__(
        self, name: str = MOTIFS, root: str | Path | None = None, batch_size: int = 32, num_graphs: int = 1000,
        num_nodes: int = 20, val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0, fold: int = 0,
        num_folds: int = 10, fold_seed: int = 0, use_node_attr: bool = False, max_degree: int = 64,
        download: bool = False, pe: Encoding = "none", pe_dim: int = 8,
    ) -> None:
        super().__init__()
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be 'motifs', 'peptides-func' or a TU dataset's name, got {name!r}")
        self.name: str = name
        self.root, self.download = root, download
        self._refuse_foreign_options(locals())
        if self.kind == "motifs" and not (
            0.0 < val_fraction < 1.0 and 0.0 < test_fraction < 1.0 and val_fraction + test_fraction < 1.0
        ):
            raise ValueError(
                f"need 0 < val_fraction, test_fraction and their sum < 1, got {val_fraction} and {test_fraction}"
            )
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        self.num_graphs = check_nonneg_int("num_graphs", num_graphs, minimum=3)
        self.num_nodes = check_nonneg_int("num_nodes", num_nodes, minimum=2)
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.batch_size = check_nonneg_int("batch_size", batch_size, minimum=1)
        self.seed = seed
        self.num_folds = check_nonneg_int("num_folds", num_folds, minimum=2)
        self.fold = check_nonneg_int("fold", fold)
        if fold >= num_folds:
            raise ValueError(f"fold must be 0 to num_folds - 1 = {num_folds - 1}, got {fold}")
        self.fold_seed, self.use_node_attr = fold_seed, use_node_attr
        self.max_degree = check_nonneg_int("max_degree", max_degree, minimum=1)
        if pe not in ("none", "random_walk", "laplacian"):
            raise ValueError(f"pe must be 'none', 'random_walk' or 'laplacian', got {pe!r}")
        self.pe, self.pe_dim = pe, check_nonneg_int("pe_dim", pe_dim, minimum=1)
        self.splits: dict[str, list[Any]] = {}
        #: The indices (into the dataset's graphs) of each split, after :meth:`setup`.
        self.split_indices: dict[str, torch.Tensor] = {}
        self._sizes: tuple[int, int, int] | None = None  # features, edge features, classes

    @property
    def kind(self) -> Literal["motifs", "tu", "peptides"]:
        """What ``name`` selects: ``"motifs"``, ``"peptides"`` or ``"tu"``."""
        return "motifs" if self.name == MOTIFS else "peptides" if self.name == PEPTIDES else "tu"

    def _refuse_foreign_options(self, given: dict[str, Any]) -> None:
        """Refuse an option another kind of data reads, set away from its default."""
        defaults = inspect.signature(GraphDataModule.__init__).parameters
        for option in dict.fromkeys(o for options in _OPTIONS.values() for o in options):
            if option in _OPTIONS[self.kind] or given[option] == defaults[option].default:
                continue
            readers = " and ".join(k if k != "tu" else "TU datasets" for k, o in _OPTIONS.items() if option in o)
            raise ValueError(
                f"{option}={given[option]!r} applies to {readers}, not to name={self.name!r}: leave it at its "
                f"default {defaults[option].default!r} (set, for instance, in the config's data: block)"
            )

    @property
    def task(self) -> Literal["multiclass", "multilabel"]:
        """``"multilabel"`` for peptides-func (10 binary labels per graph), else ``"multiclass"``."""
        return "multilabel" if self.kind == "peptides" else "multiclass"

    def _size(self, i: int) -> int:
        if self.kind == "motifs":
            return (1, 0, 2)[i]
        if self.kind == "peptides":
            return (9, 3, PEPTIDES_NUM_LABELS)[i]
        self.setup()
        assert self._sizes is not None
        return self._sizes[i]

    @property
    def num_features(self) -> int:
        """Node feature columns F of ``x`` (N, F): 1 for motifs, 9 categories for peptides, a TU set's
        node labels (PROTEINS 3, MUTAG 7; with ``use_node_attr`` its attributes too: PROTEINS 4)."""
        return self._size(0)

    @property
    def num_edge_features(self) -> int:
        """Edge feature columns of ``edge_attr`` (M, F_e); 0 where graphs have none (motifs, PROTEINS)."""
        return self._size(1)

    @property
    def num_classes(self) -> int:
        """Classes (multiclass), or binary labels per graph (multilabel: 10 for peptides)."""
        return self._size(2)

    @property
    def feature_cardinalities(self) -> list[int] | None:
        """Category count of each column of ``x`` where the node features are categories (long; peptides:
        atomic number, chirality, ...), for an embedding per column; ``None`` for float features."""
        return self._cardinalities(0)

    @property
    def edge_feature_cardinalities(self) -> list[int] | None:
        """Category count of each column of ``edge_attr`` where edge features are categories (peptides:
        bond type, stereo, conjugated); ``None`` otherwise."""
        return self._cardinalities(1)

    def _cardinalities(self, i: int) -> list[int] | None:
        if self.kind != "peptides":
            return None
        return molecule_cardinalities()[i]

    def prepare_data(self) -> None:
        if self.kind != "motifs":  # read (and process or build) once, before any setup
            self.setup()

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if self.kind == "motifs":
            graphs = motif_graphs(self.num_graphs, self.num_nodes, self.seed)
            order = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(self.seed))
            n_val = max(1, round(self.val_fraction * len(graphs)))
            n_test = max(1, round(self.test_fraction * len(graphs)))
            index = {"test": order[:n_test], "val": order[n_test : n_test + n_val], "train": order[n_test + n_val :]}
        elif self.kind == "peptides":
            graphs, index = peptides_func(self.root, self.download)
        else:
            graphs, index = self._tu()
        add_encodings(graphs, self.pe, self.pe_dim, cache=self.kind != "motifs", progress=self.kind == "peptides")
        self.split_indices = {stage: index[stage] for stage in _STAGES}
        self.splits = {stage: [graphs[i] for i in index[stage].tolist()] for stage in ("test", "val", "train")}

    def _tu(self) -> tuple[list[Any], dict[str, torch.Tensor]]:
        graphs = tu_graphs(self.name, self.root, self.use_node_attr, self.max_degree, self.download)
        y = torch.cat([g.y.view(-1) for g in graphs])
        test = stratified_folds(y, self.num_folds, self.fold_seed) == self.fold
        rest = (~test).nonzero().view(-1)
        # each fold's validation draw from the fold seed and the fold alone
        held = stratified_holdout(y[rest], self.val_fraction, seed=self.fold_seed * self.num_folds + self.fold)
        edge_attr = graphs[0].edge_attr
        self._sizes = (graphs[0].x.size(1), 0 if edge_attr is None else edge_attr.size(1), int(y.max()) + 1)
        return graphs, {"train": rest[~held], "val": rest[held], "test": test.nonzero().view(-1)}

    def _loader(self, split: str, shuffle: bool) -> Any:
        from torch_geometric.loader import DataLoader
        from torch_geometric.loader.dataloader import Collater

        if shuffle:  # training: resumable mid-epoch (same batches after a crash and resume)
            data = self.splits[split]
            return ResumableDataLoader(data, batch_size=self.batch_size, shuffle=True, collate_fn=Collater(data))
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=False)

    def predict_dataloader(self) -> Any:
        return self._loader("test", False)

    def __repr__(self) -> str:
        parts = [f"name={self.name!r}"]
        if self.kind == "tu":
            parts.append(f"fold={self.fold}/{self.num_folds}, fold_seed={self.fold_seed}")
        if self.pe != "none":
            parts.append(f"pe={self.pe!r}, pe_dim={self.pe_dim}")
        parts.append(", ".join(f"{k}={len(self.splits[k])}" for k in _STAGES) if self.splits else "not set up")
        return f"{type(self).__name__}({', '.join(parts)})"


class MotifGraphsDataModule(GraphDataModule):
    r"""Graph classification on :func:`motif_graphs` (house vs 5-cycle motif on a random base graph):
    :class:`GraphDataModule` with ``name="motifs"``, taking the motif options only. Generated in
    :meth:`setup` from ``seed``: nothing to download. Splits are fixed fractions of the graphs;
    batches are PyG ``Batch`` objects with graph labels ``y`` (B,).

    Args:
        num_graphs (int, optional): number of graphs. (default: :obj:`1000`)
        num_nodes (int, optional): nodes of each base graph. (default: :obj:`20`)
        val_fraction (float, optional): share of graphs for validation. (default: :obj:`0.1`)
        test_fraction (float, optional): share of graphs for testing. (default: :obj:`0.1`)
        batch_size (int, optional): graphs per batch. (default: :obj:`32`)
        seed (int, optional): seed of the graphs. (default: :obj:`0`)

    Examples:
        >>> dm = MotifGraphsDataModule(num_graphs=20, batch_size=4)
        >>> dm.setup()
        >>> batch = next(iter(dm.train_dataloader()))
        >>> batch.num_graphs, batch.y.shape
        (4, torch.Size([4]))
    """

    def __init__(self, num_graphs: int = 1000, num_nodes: int = 20, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, batch_size: int = 32, seed: int = 0) -> None:
        super().__init__(MOTIFS, None, batch_size, num_graphs, num_nodes, val_fraction, test_fraction, seed)
