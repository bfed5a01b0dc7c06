"""Peptides-func from its SMILES CSV and split pickle: molecular graphs with categorical features, built
once and cached, the split read without running code, and the real set's sizes."""

from __future__ import annotations

import builtins
import pickle
from pathlib import Path

import pytest
import torch
from _graph_data import write_peptides
from _recipes import data_root

from attnmm.data.peptides import molecule_cardinalities, peptides_func, read_split


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_graphs_labels_and_split(tmp_path: Path, cache: Path) -> None:
    pytest.importorskip("rdkit")
    labels = write_peptides(tmp_path / "data")
    graphs, split = peptides_func(tmp_path / "data", progress=False)
    assert len(graphs) == 12 and {k: len(v) for k, v in split.items()} == {"train": 6, "val": 3, "test": 3}
    assert sorted(torch.cat(list(split.values())).tolist()) == list(range(12))
    ethanol = graphs[0]  # CCO: 3 heavy atoms, 2 bonds stored both ways
    assert ethanol.x.shape == (3, 9) and ethanol.edge_index.shape == (2, 4) and ethanol.edge_attr.shape == (4, 3)
    assert ethanol.x.dtype == torch.long and ethanol.x[:, 0].tolist() == [6, 6, 8]  # atomic numbers
    atoms, bonds = molecule_cardinalities()
    for g in graphs:
        assert (g.x < torch.tensor(atoms)).all() and (g.edge_attr < torch.tensor(bonds)).all()
        assert int(g.edge_index.max()) < g.num_nodes  # indices within each graph
    assert torch.equal(torch.cat([g.y for g in graphs]), torch.tensor(labels, dtype=torch.float))


def test_built_once_then_read_from_the_cache(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rdkit")
    write_peptides(tmp_path / "data")
    first, _ = peptides_func(tmp_path / "data", progress=False)
    (built,) = (cache / "lrgb" / "peptides-functional" / "processed").iterdir()
    stamp = built.stat().st_mtime_ns
    import torch_geometric.utils

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(torch_geometric.utils, "from_smiles", no_build)
    again, _ = peptides_func(tmp_path / "data", progress=False)
    assert built.stat().st_mtime_ns == stamp and all(torch.equal(a.x, b.x) for a, b in zip(first, again))
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(k.get("weights_only")) or real_load(*a, **k))
    peptides_func(tmp_path / "data", progress=False)
    assert loads == [True]  # the cached file is read without unpickling


def test_a_new_csv_gets_its_own_cached_file(tmp_path: Path, cache: Path) -> None:
    pytest.importorskip("rdkit")
    write_peptides(tmp_path / "a")
    write_peptides(tmp_path / "b", peptides=9, split=(5, 2, 2))
    assert len(peptides_func(tmp_path / "a", progress=False)[0]) == 12
    assert len(peptides_func(tmp_path / "b", progress=False)[0]) == 9
    assert len(list((cache / "lrgb" / "peptides-functional" / "processed").iterdir())) == 2


def test_without_rdkit_the_error_names_the_extra(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_peptides(tmp_path / "data")
    real_import = builtins.__import__

    def no_rdkit(name: str, *args: object, **kwargs: object) -> object:
        if name == "rdkit" or name.startswith("rdkit."):
            raise ImportError("No module named 'rdkit'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rdkit)
    with pytest.raises(ImportError, match=r"needs RDKit: pip install attnmm\[chem\]"):
        peptides_func(tmp_path / "data", progress=False)


def test_missing_files_are_named(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"Peptides-func not found: .*peptide_multi_class_dataset\.csv\.gz.*"
                       r"splits_random_stratified_peptide\.pickle.*lrgb/peptides-functional.*download=True"):
        peptides_func(tmp_path)


def test_the_split_file_rebuilds_numpy_arrays_only(tmp_path: Path) -> None:
    class Sneaky:
        def __reduce__(self) -> tuple:
            return (print, ("ran code",))

    path = tmp_path / "split.pickle"
    path.write_bytes(pickle.dumps({"train": Sneaky(), "val": [], "test": []}))
    with pytest.raises(RuntimeError, match=r"numpy index arrays only, not builtins\.print"):
        read_split(path, 10)
    import numpy as np

    path.write_bytes(pickle.dumps({"train": np.arange(3), "val": np.array([3]), "test": np.array([12])}))
    with pytest.raises(RuntimeError, match=r"'test' split .* indexes up to 12, but the CSV has 10"):
        read_split(path, 10)


@pytest.mark.data
@pytest.mark.slow
def test_real_peptides_func(tmp_path: Path, cache: Path) -> None:
    """The whole set (built from its 15,535 SMILES: about a minute)."""
    pytest.importorskip("rdkit")
    graphs, split = peptides_func(data_root("lrgb"), progress=False)
    assert len(graphs) == 15535
    assert {k: len(v) for k, v in split.items()} == {"train": 10873, "val": 2331, "test": 2331}
    assert sorted(torch.cat(list(split.values())).tolist()) == list(range(15535))
    y = torch.cat([g.y for g in graphs])
    assert y.shape == (15535, 10) and set(y.unique().tolist()) == {0.0, 1.0}
    for stage in ("val", "test"):  # every label has positives in each evaluated split (AP is defined)
        assert (y[split[stage]].sum(0) > 0).all()
