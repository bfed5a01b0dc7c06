"""NodeDataModule: Actor's ten geom-gcn splits, directed or symmetrised edges, split options refused by
name, and the real Actor graph (7,600 nodes, 48/32/20 splits)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _graph_data import write_actor
from _recipes import data_root

from attnmm.common.feature_knn import feature_knn
from attnmm.data import NodeDataModule, PlanetoidDataModule


@pytest.fixture
def actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    write_actor(tmp_path / "data")
    return tmp_path / "data"


def test_actor_split_index_picks_a_split(actor: Path, tmp_path: Path) -> None:
    masks = []
    for i in (0, 3):
        dm = NodeDataModule(root=actor, name="Actor", split_index=i)
        dm.setup()
        data = dm.data
        assert (data.num_nodes, dm.num_features, dm.num_classes, dm.task) == (30, 8, 3, "multiclass")
        assert [int(data[f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [15, 9, 6]
        assert data.train_mask.shape == (30,) and bool(data.train_mask[i])  # split i's training part starts at i
        masks.append(data.train_mask)
        assert next(iter(dm.train_dataloader())) is data  # one full batch
    assert not torch.equal(*masks)
    assert (tmp_path / "cache" / "actor" / "processed" / "data.pt").is_file()  # processed in the copy
    assert not (actor / "actor" / "processed").exists()
    assert repr(NodeDataModule(root=actor, name="Actor")).endswith("split='geom-gcn', split_index=0)")


def test_actor_edges_are_directed_unless_asked(actor: Path) -> None:
    directed = NodeDataModule(root=actor, name="Actor")
    directed.setup()
    assert directed.data.num_edges == 40 and directed.data.is_directed()
    undirected = NodeDataModule(root=actor, name="Actor", to_undirected=True)
    undirected.setup()
    assert undirected.data.num_edges == 80 and not undirected.data.is_directed()


def test_feature_neighbors_add_the_nearest_nodes_by_features(actor: Path) -> None:
    plain = NodeDataModule(root=actor, name="Actor", to_undirected=True)
    plain.setup()
    dm = NodeDataModule(root=actor, name="Actor", to_undirected=True, feature_neighbors=3)
    dm.setup()
    edges, x = dm.data.edge_index, dm.data.x
    knn = feature_knn(x, 3).edge_index
    want = torch.unique(torch.cat([plain.data.edge_index, knn], 1), dim=1)
    assert torch.equal(edges, want)  # the graph's edges and each node's 3 nearest as in-edges, once each
    assert torch.bincount(knn[1], minlength=30).eq(3).all()
    assert repr(dm).endswith("to_undirected=True, feature_neighbors=3)")
    with pytest.raises(ValueError, match="feature_neighbors must be"):
        NodeDataModule(name="Actor", feature_neighbors=-1)


def test_split_options_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Actor has geom-gcn's ten splits only.*split_index"):
        NodeDataModule(name="Actor", split="full")
    with pytest.raises(ValueError, match=r"Cora's 'public' split is one split.*split='geom-gcn'"):
        NodeDataModule(name="Cora", split_index=3)
    with pytest.raises(ValueError, match=r"splits \(0 to 9\), got 10"):
        NodeDataModule(name="Actor", split_index=10)
    match = r"name must be one of Cora, CiteSeer, PubMed, got 'Actor' \(Actor: use NodeDataModule\)"
    with pytest.raises(ValueError, match=match):
        PlanetoidDataModule(name="Actor")
    assert NodeDataModule(name="Cora", split="geom-gcn", split_index=2).split_index == 2


def test_missing_actor_files_say_where_to_put_them(tmp_path: Path) -> None:
    match = r"Actor not found: no raw files in .*actor/raw.*geom-gcn.*download=True"
    with pytest.raises(FileNotFoundError, match=match):
        NodeDataModule(root=tmp_path, name="Actor").prepare_data()
    write_actor(tmp_path)
    (tmp_path / "actor" / "raw" / "film_split_0.6_0.2_7.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks film_split_0\.6_0\.2_7\.npz"):
        NodeDataModule(root=tmp_path, name="Actor").prepare_data()


@pytest.mark.data
def test_real_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = data_root("actor")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    trains = set()
    for i in range(10):
        dm = NodeDataModule(root=root, name="Actor", split_index=i)
        dm.setup()
        data = dm.data
        assert (data.num_nodes, data.num_edges, dm.num_features, dm.num_classes) == (7600, 30019, 932, 5)
        sizes = [int(data[f"{s}_mask"].sum()) for s in ("train", "val", "test")]
        assert sizes == [3648, 2432, 1520]
        assert not (data.train_mask & data.test_mask).any() and not (data.val_mask & data.test_mask).any()
        trains.add(tuple(data.train_mask.nonzero().view(-1)[:20].tolist()))
    assert len(trains) == 10  # ten different splits
    assert not (root / "actor" / "processed").exists()
