"""Graph classification data: motif graphs (deterministic, balanced, disjoint splits), and GraphDataModule's
name picking motifs, a TU set under stratified folds, or Peptides-func."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _graph_data import write_peptides, write_tu

from attnmm.data import GraphDataModule, MotifGraphsDataModule, motif_graphs
from attnmm.data._resumable import ResumableDataLoader


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


# ------------------------------------------------------------------ GraphDataModule: name picks the data


def test_motifs_are_the_default_and_the_old_class_is_the_same_data() -> None:
    dm, old = GraphDataModule(num_graphs=30, num_nodes=6, batch_size=8), MotifGraphsDataModule(30, 6, batch_size=8)
    dm.setup()
    old.setup()
    assert isinstance(old, GraphDataModule) and old.name == "motifs"
    for stage in ("train", "val", "test"):
        assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(dm.splits[stage], old.splits[stage]))
    assert (dm.num_features, dm.num_edge_features, dm.num_classes, dm.task) == (1, 0, 2, "multiclass")
    assert dm.feature_cardinalities is None and repr(dm) == "GraphDataModule(name='motifs', train=24, val=3, test=3)"
    assert isinstance(dm.train_dataloader(), ResumableDataLoader)


def test_options_of_other_data_are_refused() -> None:
    with pytest.raises(ValueError, match=r"fold=3 applies to TU datasets, not to name='motifs': leave it at"):
        GraphDataModule(fold=3)
    with pytest.raises(ValueError, match=r"num_graphs=50 applies to motifs, not to name='PROTEINS'"):
        GraphDataModule(name="PROTEINS", num_graphs=50)
    match = r"val_fraction=0\.2 applies to motifs and TU datasets, not to name='peptides-func'"
    with pytest.raises(ValueError, match=match):
        GraphDataModule(name="peptides-func", val_fraction=0.2)
    with pytest.raises(ValueError, match="fold must be 0 to num_folds - 1 = 4, got 5"):
        GraphDataModule(name="PROTEINS", fold=5, num_folds=5)
    # the config's motif values, all defaults, do not stand in the way of another name
    GraphDataModule(name="PROTEINS", num_graphs=1000, num_nodes=20, seed=0, fold=9)


def test_peptides_sizes_are_known_without_the_data() -> None:
    dm = GraphDataModule(name="peptides-func", root="/nonexistent")
    assert (dm.num_features, dm.num_edge_features, dm.num_classes, dm.task) == (9, 3, 10, "multilabel")
    assert dm.feature_cardinalities == [119, 9, 11, 12, 9, 5, 8, 2, 2] and dm.edge_feature_cardinalities == [22, 6, 2]


def test_tu_folds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    labels = torch.tensor(write_tu(tmp_path, graphs=40, classes=2, edge_labels=3))
    tests = []
    for fold in range(4):
        dm = GraphDataModule(name="TOY", root=tmp_path, fold=fold, num_folds=4, batch_size=4)
        dm.setup()
        index = dm.split_indices
        assert sorted(torch.cat(list(index.values())).tolist()) == list(range(40))  # disjoint, complete
        assert [len(index[s]) for s in ("train", "val", "test")] == [27, 3, 10]
        assert torch.bincount(labels[index["test"]]).tolist() == [5, 5]  # stratified
        assert [int(g.y) for g in dm.splits["test"]] == labels[index["test"]].tolist()
        tests.append(set(index["test"].tolist()))
    assert set().union(*tests) == set(range(40)) and sum(map(len, tests)) == 40  # each graph tested once
    assert (dm.num_features, dm.num_edge_features, dm.num_classes) == (3, 3, 2)
    batch = next(iter(dm.train_dataloader()))
    assert batch.num_graphs == 4 and batch.edge_attr.size(1) == 3
    assert repr(dm) == "GraphDataModule(name='TOY', fold=3/4, fold_seed=0, train=27, val=3, test=10)"
    other = GraphDataModule(name="TOY", root=tmp_path, fold=3, num_folds=4, fold_seed=1)
    other.setup()
    assert set(other.split_indices["test"].tolist()) != tests[3]


def test_peptides_through_the_datamodule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rdkit")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    write_peptides(tmp_path)
    dm = GraphDataModule(name="peptides-func", root=tmp_path, batch_size=3)
    dm.prepare_data()
    dm.setup()
    assert repr(dm) == "GraphDataModule(name='peptides-func', train=6, val=3, test=3)"
    batch = next(iter(dm.val_dataloader()))
    assert batch.y.shape == (3, 10) and batch.x.dtype == torch.long and batch.x.size(1) == dm.num_features


@pytest.mark.data
@pytest.mark.parametrize(("name", "count"), [("PROTEINS", 1113), ("MUTAG", 188)])
def test_real_tu_protocol(name: str, count: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _recipes import data_root

    root = data_root("TUDataset")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    dm = GraphDataModule(name=name, root=root, fold=3)
    dm.setup()
    sizes = {k: len(v) for k, v in dm.split_indices.items()}
    assert sum(sizes.values()) == count and sizes["test"] in (count // 10, count // 10 + 1)
    assert sizes["val"] == round(0.1 * (count - sizes["test"]))
