"""TU datasets from their text files: node features from labels, attributes or degrees, a writable copy
processed through a staging folder, and errors that name the missing files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _graph_data import write_tu
from _recipes import data_root

from attnmm.data.tu import degree_features, tu_graphs


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_node_labels_attributes_and_edge_labels(tmp_path: Path, cache: Path) -> None:
    labels = write_tu(tmp_path / "data", graphs=8, classes=3, node_labels=3, node_attributes=2, edge_labels=4)
    graphs = tu_graphs("TOY", root=tmp_path / "data")
    assert len(graphs) == 8 and [int(g.y) for g in graphs] == labels
    assert graphs[0].x.shape == (3, 3) and graphs[0].edge_attr.shape == (6, 4)  # one-hot labels only
    assert torch.equal(graphs[0].x.sum(1), torch.ones(3))
    with_attr = tu_graphs("TOY", root=tmp_path / "data", use_node_attr=True)
    assert with_attr[0].x.shape == (3, 5)  # the two attributes, then the labels
    assert torch.equal(with_attr[0].x[:, 2:], graphs[0].x)
    assert (cache / "TUDataset" / "TOY" / "processed" / "data.pt").is_file()  # processed in the copy
    assert not (tmp_path / "data" / "TUDataset" / "TOY" / "processed").exists()
    assert not [p for p in (cache / "TUDataset").iterdir() if "processing" in p.name]  # staging removed


def test_graphs_without_node_features_get_capped_degrees(tmp_path: Path, cache: Path) -> None:
    write_tu(tmp_path / "data", name="PLAIN", graphs=6, node_labels=None)
    graphs = tu_graphs("PLAIN", root=tmp_path / "data", max_degree=1)
    assert graphs[0].x.shape == (3, 2) and torch.equal(graphs[0].x, torch.tensor([[0.0, 1.0]] * 3))  # degree 2 >= cap
    assert tu_graphs("PLAIN", root=tmp_path / "data")[0].x.shape == (3, 65)  # default cap 64
    write_tu(tmp_path / "data", name="ATTR", graphs=6, node_labels=None, node_attributes=2)
    assert tu_graphs("ATTR", root=tmp_path / "data", use_node_attr=True)[0].x.shape == (3, 2)
    assert tu_graphs("ATTR", root=tmp_path / "data")[0].x.shape == (3, 65)  # attributes not used: degrees


def test_degree_features() -> None:
    edge_index = torch.tensor([[1, 2, 3, 0, 0, 0], [0, 0, 0, 1, 2, 3]])  # a star, both directions
    x = degree_features(edge_index, 5, max_degree=2)
    assert x.tolist() == [[0, 0, 1], [0, 1, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]]


def test_missing_files_are_named(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"TU dataset 'NOPE' not found: .*TUDataset/NOPE/raw holds no TU files.*"
                       r"NOPE_A\.txt.*download=True.*'motifs'.*'peptides-func'"):
        tu_graphs("NOPE", root=tmp_path)
    write_tu(tmp_path, graphs=4)
    (tmp_path / "TUDataset" / "TOY" / "raw" / "TOY_graph_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"holds not TOY_graph_labels\.txt \(missing or empty\)"):
        tu_graphs("TOY", root=tmp_path)
    assert not cache.exists()  # nothing copied


def test_unreadable_files_leave_nothing_processed(tmp_path: Path, cache: Path) -> None:
    write_tu(tmp_path, graphs=4)
    (tmp_path / "TUDataset" / "TOY" / "raw" / "TOY_graph_indicator.txt").write_text("1\nx\n")
    with pytest.raises(RuntimeError, match=r"could not read the TU dataset TOY from .*replace the files"):
        tu_graphs("TOY", root=tmp_path)
    assert not (cache / "TUDataset" / "TOY" / "processed").exists()


@pytest.mark.data
@pytest.mark.parametrize(
    ("name", "count", "features", "edge_features"), [("PROTEINS", 1113, 3, 0), ("MUTAG", 188, 7, 4)]
)
def test_real_tu_sets(name: str, count: int, features: int, edge_features: int, tmp_path: Path, cache: Path) -> None:
    graphs = tu_graphs(name, root=data_root("TUDataset"))
    assert len(graphs) == count and {int(g.y) for g in graphs} == {0, 1}
    assert graphs[0].x.size(1) == features
    assert (0 if graphs[0].edge_attr is None else graphs[0].edge_attr.size(1)) == edge_features
