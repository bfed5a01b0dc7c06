"""Encodings computed once per graph: equal to PyG's transforms, cached under a key of the graphs' structure,
stored by GraphDataModule(pe=...) on every graph and read by the adapter instead of computed per batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

import attnmm.data.encodings as encodings
from attnmm.adapters import GraphAdapter
from attnmm.common.encodings import graph_encoding
from attnmm.data import GraphDataModule, motif_graphs
from attnmm.data.encodings import add_encodings


def _graphs(count: int = 6, seed: int = 0) -> list[Data]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = 3 + 5 * i  # 3 to 28 nodes: smaller and larger than the widths below
        edges = torch.randint(0, n, (2, 2 * n), generator=g)
        edges = to_undirected(edges[:, edges[0] != edges[1]], num_nodes=n)
        out.append(Data(edge_index=edges, num_nodes=n))
    return out


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_random_walk_equals_pygs_transform() -> None:
    for g in _graphs():
        want = T.AddRandomWalkPE(16, attr_name="pe")(g.clone()).pe
        torch.testing.assert_close(graph_encoding(g, "random_walk", 16), want)


def test_laplacian_equals_pygs_transform_up_to_sign_and_pads_small_graphs() -> None:
    for g in _graphs():
        got = graph_encoding(g, "laplacian", 8)
        assert got.shape == (g.num_nodes, 8) and got.dtype == torch.float32
        k = min(8, g.num_nodes - 1)
        want = T.AddLaplacianEigenvectorPE(k, attr_name="pe", is_undirected=True)(g.clone()).pe
        if g.num_nodes > 9:  # distinct eigenvalues almost surely: columns equal up to sign
            torch.testing.assert_close(got[:, :k].abs(), want.float().abs(), atol=1e-5, rtol=1e-4)
        assert not got[:, k:].any()  # a graph of n <= 8 nodes has n - 1 of them; the rest are zeros
    with pytest.raises(ValueError, match="'laplacian' or 'random_walk'"):
        graph_encoding(_graphs(1)[0], "spectral", 4)  # type: ignore[arg-type]


def test_computed_once_then_read_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graphs = _graphs()
    add_encodings(graphs, "random_walk", 6)
    (stored,) = (cache / "encodings").iterdir()
    first = [g.random_walk_pe.clone() for g in graphs]
    for g in graphs:
        assert g.random_walk_pe.shape == (g.num_nodes, 6)
        torch.testing.assert_close(g.random_walk_pe, graph_encoding(g, "random_walk", 6))

    def no_compute(*args: object) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(encodings, "graph_encoding", no_compute)
    again = _graphs()
    add_encodings(again, "random_walk", 6)
    assert all(torch.equal(a.random_walk_pe, b) for a, b in zip(again, first))
    with pytest.raises(AssertionError, match="computed again"):  # other edges, another key
        add_encodings(_graphs(seed=1), "random_walk", 6)
    with pytest.raises(AssertionError, match="computed again"):  # another width, another key
        add_encodings(_graphs(), "random_walk", 5)
    assert [p.name for p in (cache / "encodings").iterdir()] == [stored.name]
    add_encodings(_graphs(), "none", 6)  # nothing to compute


def test_the_datamodule_stores_them_and_the_adapter_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    dm = GraphDataModule(num_graphs=12, batch_size=4, pe="random_walk", pe_dim=5)
    dm.setup()
    assert "pe='random_walk', pe_dim=5" in repr(dm)
    batch = next(iter(dm.train_dataloader()))
    assert batch.random_walk_pe.shape == (batch.num_nodes, 5)
    adapter = GraphAdapter(in_channels=1, d_model=None, pe="random_walk", pe_dim=5)
    want = adapter(batch).x  # the stored encodings, equal to the ones computed per graph
    graphs = Batch.from_data_list([Data(x=g.x, edge_index=g.edge_index) for g in batch.to_data_list()])
    torch.testing.assert_close(want, adapter(graphs).x)

    def no_compute(*args: object) -> None:
        raise AssertionError("computed per batch")

    monkeypatch.setattr(encodings, "graph_encoding", no_compute)
    adapter(batch)  # read, not computed
    with pytest.raises(ValueError, match="stores random_walk_pe of shape .* but the adapter's pe_dim is 4"):
        GraphAdapter(in_channels=1, d_model=8, pe="random_walk", pe_dim=4)(batch)
    with pytest.raises(ValueError, match="pe must be 'none', 'random_walk' or 'laplacian'"):
        GraphDataModule(pe="spectral")  # type: ignore[arg-type]


def test_without_the_cache_nothing_is_written(cache: Path) -> None:
    add_encodings(motif_graphs(4, num_nodes=8), "laplacian", 3, cache=False)
    assert not cache.exists()
