r"""Synthetic motif graphs for graph classification, generated locally (no download)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule

from attnmm._checks import check_nonneg_int
from attnmm.data._resumable import ResumableDataLoader

__all__ = ["MotifGraphsDataModule", "motif_graphs"]


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


class MotifGraphsDataModule(LightningDataModule):
    r"""Graph classification on :func:`motif_graphs` (house vs 5-cycle motif on a random base graph),
    generated in :meth:`setup` from ``seed``: nothing to download. Splits are fixed fractions of the
    graphs; batches are PyG ``Batch`` objects with graph labels ``y`` (B,).

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

    num_classes: int = 2

    def __init__(
        self,
        num_graphs: int = 1000,
        num_nodes: int = 20,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        batch_size: int = 32,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not (0.0 < val_fraction < 1.0 and 0.0 < test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
            raise ValueError(
                f"need 0 < val_fraction, test_fraction and their sum < 1, got {val_fraction} and {test_fraction}"
            )
        self.num_graphs = check_nonneg_int("num_graphs", num_graphs, minimum=3)
        self.num_nodes = check_nonneg_int("num_nodes", num_nodes, minimum=2)
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.batch_size = check_nonneg_int("batch_size", batch_size, minimum=1)
        self.seed = seed
        self.splits: dict[str, list[Any]] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        graphs = motif_graphs(self.num_graphs, self.num_nodes, self.seed)
        order = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(self.seed)).tolist()
        n_val = max(1, round(self.val_fraction * len(graphs)))
        n_test = max(1, round(self.test_fraction * len(graphs)))
        self.splits = {
            "test": [graphs[i] for i in order[:n_test]],
            "val": [graphs[i] for i in order[n_test : n_test + n_val]],
            "train": [graphs[i] for i in order[n_test + n_val :]],
        }

    def _loader(self, split: str, shuffle: bool) -> Any:
        from torch_geometric.loader import DataLoader
        from torch_geometric.loader.dataloader import Collater

        if shuffle:  # training: resumable mid-epoch (same batches after a crash and resume)
            data = self.splits[split]
            return ResumableDataLoader(data, batch_size=self.batch_size, shuffle=True, collate_fn=Collater(data))
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=False)

    def train_dataloader(self) -> Any:
        return self._loader("train", True)

    def val_dataloader(self) -> Any:
        return self._loader("val", False)

    def test_dataloader(self) -> Any:
        return self._loader("test", False)

    def predict_dataloader(self) -> Any:
        return self._loader("test", False)
