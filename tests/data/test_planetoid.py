"""PlanetoidDataModule on the real Cora files: public split, writable copy, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from _recipes import data_root, write_planetoid

from attnmm.data import PlanetoidDataModule


@pytest.mark.data
def test_cora_public_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = data_root("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    dm = PlanetoidDataModule(root=root)
    dm.prepare_data()
    dm.setup()
    data = dm.data
    assert (data.num_nodes, data.num_edges, dm.num_features, dm.num_classes) == (2708, 10556, 1433, 7)
    assert [int(data[f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [140, 500, 1000]
    assert (tmp_path / "cache" / "planetoid" / "Cora" / "processed").is_dir()  # processed in the copy
    assert not (root / "planetoid" / "Cora" / "processed").exists()
    assert next(iter(dm.train_dataloader())) is data  # one full batch
    assert abs(float(data.x.sum(1).max()) - 1.0) < 1e-5  # row-normalised features


def test_missing_data_says_where_to_put_it(tmp_path: Path) -> None:
    dm = PlanetoidDataModule(root=tmp_path, name="CiteSeer")
    with pytest.raises(FileNotFoundError, match=r"no raw files in .*planetoid/CiteSeer/raw.*ind\.citeseer"):
        dm.prepare_data()
    with pytest.raises(ValueError, match="name must be one of Cora, CiteSeer, PubMed"):
        PlanetoidDataModule(name="Reddit")


# ------------------------------------------------------------------ bad data, on generated files

def _write_planetoid(raw: Path) -> None:
    """The shared tiny Planetoid graph (tests/_recipes.py) at ``raw = <root>/planetoid/Cora/raw``."""
    write_planetoid(raw.parents[2], train=6, test=10)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _leftovers(cache: Path) -> list[str]:
    """Everything under the cache, as relative paths."""
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) if cache.exists() else []


def test_generated_graph_is_processed_once_in_the_cache(tmp_path: Path, cache: Path) -> None:
    _write_planetoid(tmp_path / "data" / "planetoid" / "Cora" / "raw")
    dm = PlanetoidDataModule(root=tmp_path / "data")
    dm.setup()
    assert dm.data.num_nodes == 516 and dm.num_classes == 3 and int(dm.data.val_mask.sum()) == 500
    processed = cache / "planetoid" / "Cora" / "processed"
    assert (processed / "data.pt").is_file()
    assert not [p for p in _leftovers(cache) if ".Cora-processing-" in p or ".tmp-" in p]  # staging removed
    stamp = (processed / "data.pt").stat().st_mtime_ns
    PlanetoidDataModule(root=tmp_path / "data").setup()  # re-used, not processed again
    assert (processed / "data.pt").stat().st_mtime_ns == stamp


def test_a_missing_raw_file_is_named_and_nothing_is_cached(tmp_path: Path, cache: Path) -> None:
    raw = tmp_path / "data" / "planetoid" / "Cora" / "raw"
    _write_planetoid(raw)
    (raw / "ind.cora.graph").unlink()
    (raw / "ind.cora.ty").write_bytes(b"")  # an empty file counts as missing
    dm = PlanetoidDataModule(root=tmp_path / "data")
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert f"{raw} lacks ind.cora.ty, ind.cora.graph" in message
    assert "https://github.com/kimiyoung/planetoid" in message and "download=True" in message
    assert _leftovers(cache) == []  # no incomplete copy that a later run would trust


def test_a_corrupt_raw_file_is_named_and_nothing_half_written_is_left(tmp_path: Path, cache: Path) -> None:
    raw = tmp_path / "data" / "planetoid" / "Cora" / "raw"
    _write_planetoid(raw)
    allx = (raw / "ind.cora.allx").read_bytes()
    (raw / "ind.cora.allx").write_bytes(allx[: len(allx) // 2])  # truncated
    with pytest.raises(RuntimeError, match=r"raw file .*ind\.cora\.allx is corrupt or truncated.*replace it") as info:
        PlanetoidDataModule(root=tmp_path / "data").setup()
    assert f"It was copied from {raw / 'ind.cora.allx'}" in str(info.value)  # the original needs fixing too
    copy = cache / "planetoid" / "Cora"
    assert not (copy / "processed").exists()
    assert [p for p in _leftovers(cache) if not p.startswith("planetoid/Cora/raw")] == ["planetoid", "planetoid/Cora"]
    # the fix the message gives works: replace the file (here in the cache copy) and run again
    (copy / "raw" / "ind.cora.allx").write_bytes(allx)
    dm = PlanetoidDataModule(root=tmp_path / "data")
    dm.setup()
    assert dm.data.num_nodes == 516


def test_an_incomplete_cached_copy_is_not_trusted(tmp_path: Path, cache: Path) -> None:
    _write_planetoid(tmp_path / "data" / "planetoid" / "Cora" / "raw")
    stale = cache / "planetoid" / "Cora" / "raw"
    stale.mkdir(parents=True)  # as an older version left it after copying an incomplete folder
    (stale / "ind.cora.x").write_bytes(b"x")
    match = r"cached copy .*planetoid/Cora of Planetoid Cora lacks ind\.cora\.tx.* delete"
    with pytest.raises(FileNotFoundError, match=match):
        PlanetoidDataModule(root=tmp_path / "data").prepare_data()


def test_a_damaged_processed_file_is_named(tmp_path: Path, cache: Path) -> None:
    _write_planetoid(tmp_path / "data" / "planetoid" / "Cora" / "raw")
    PlanetoidDataModule(root=tmp_path / "data").setup()
    data_pt = cache / "planetoid" / "Cora" / "processed" / "data.pt"
    data_pt.write_bytes(data_pt.read_bytes()[:100])
    with pytest.raises(RuntimeError, match=r"processed Planetoid Cora from .*processed: .*delete"):
        PlanetoidDataModule(root=tmp_path / "data").setup()
