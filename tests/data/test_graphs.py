"""Synthetic motif graphs: deterministic, balanced, disjoint splits."""

from __future__ import annotations

import pytest
import torch

from attnmm.data import MotifGraphsDataModule, motif_graphs


def test_motif_graphs_are_deterministic_and_balanced() -> None:
    a, b = motif_graphs(10, num_nodes=8, seed=3), motif_graphs(10, num_nodes=8, seed=3)
    assert all(torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, b))
    assert [int(g.y) for g in a] == [0, 1] * 5
    assert all(g.num_nodes == 13 and g.x.shape == (13, 1) for g in a)
    assert len(motif_graphs(3)) == 3


def test_datamodule_splits() -> None:
    dm = MotifGraphsDataModule(num_graphs=30, num_nodes=6, val_fraction=0.2, test_fraction=0.1, batch_size=8)
    dm.setup()
    sizes = {k: len(v) for k, v in dm.splits.items()}
    assert sizes == {"test": 3, "val": 6, "train": 21}
    ids = [id(g) for split in dm.splits.values() for g in split]
    assert len(set(ids)) == 30
    batch = next(iter(dm.val_dataloader()))
    assert batch.num_graphs == 6 and batch.y.shape == (6,)
    with pytest.raises(ValueError, match="need 0 < val_fraction"):
        MotifGraphsDataModule(val_fraction=0.6, test_fraction=0.5)
