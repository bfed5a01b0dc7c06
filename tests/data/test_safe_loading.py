"""Loading data unpickles nothing, except where a dataset's own format is a pickle: Planetoid's raw
``ind.*`` files (read once, when PyG processes them) and CIFAR-10's batches. Every ``torch.load``
on the way (PyG's processed files included) runs with ``weights_only=True``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from attnmm.data import FSDDDataModule, MNISTDataModule, MotifGraphsDataModule, PlanetoidDataModule, UDPOSDataModule
from attnmm.data.shakespeare import ShakespeareDataModule


class LoadSpy:
    """Records every pickle.load/loads and every torch.load (with its weights_only) while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unpickled: list[str] = []
        self.torch_loads: list[Any] = []
        real_load, real_loads, real_torch_load = pickle.load, pickle.loads, torch.load

        def load(file: Any, *args: Any, **kwargs: Any) -> Any:
            self.unpickled.append(Path(getattr(file, "name", "?")).name)
            return real_load(file, *args, **kwargs)

        def loads(data: bytes, *args: Any, **kwargs: Any) -> Any:
            self.unpickled.append("<bytes>")
            return real_loads(data, *args, **kwargs)

        def torch_load(f: Any, *args: Any, **kwargs: Any) -> Any:
            self.torch_loads.append(kwargs.get("weights_only"))
            return real_torch_load(f, *args, **kwargs)

        monkeypatch.setattr(pickle, "load", load)
        monkeypatch.setattr(pickle, "loads", loads)
        monkeypatch.setattr(torch, "load", torch_load)


def _data(name: str) -> Path:
    from _recipes import data_root

    return data_root(name)


CASES: dict[str, tuple[str | None, Callable[[Path | None], Any]]] = {
    "motif_graphs": (None, lambda root: MotifGraphsDataModule(num_graphs=20)),
    "fsdd": ("fsdd", lambda root: FSDDDataModule(root=root)),
    "mnist": ("MNIST", lambda root: MNISTDataModule(root=root)),
    "ud": ("ud_english_ewt", lambda root: UDPOSDataModule(root=root)),
    "shakespeare": ("tinyshakespeare", lambda root: ShakespeareDataModule(root=root)),
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.data] if CASES[n][0] else []) for n in CASES]
)
def test_no_unpickling(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder, make = CASES[name]
    root = _data(folder) if folder else None
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    spy = LoadSpy(monkeypatch)
    dm = make(root)
    dm.prepare_data()
    dm.setup("fit")
    next(iter(dm.train_dataloader()))
    assert spy.unpickled == []
    assert all(w is True for w in spy.torch_loads), spy.torch_loads


@pytest.mark.data
def test_planetoid_unpickles_only_its_raw_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = _data("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    spy = LoadSpy(monkeypatch)
    dm = PlanetoidDataModule(root=root)
    dm.prepare_data()  # PyG reads the raw pickles and writes processed/data.pt
    assert spy.unpickled and all(f.startswith("ind.cora.") for f in spy.unpickled), spy.unpickled
    spy.unpickled.clear()
    PlanetoidDataModule(root=root).setup("fit")  # a later run reads the processed file only
    assert spy.unpickled == []
    assert spy.torch_loads and all(w is True for w in spy.torch_loads), spy.torch_loads
