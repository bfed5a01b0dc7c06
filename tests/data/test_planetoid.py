"""PlanetoidDataModule on the real Cora files: public split, writable copy, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from _recipes import data_root

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
