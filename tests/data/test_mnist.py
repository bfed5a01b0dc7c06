"""MNIST DataModule: IDX reading, the test-set-only 8,000 / 2,000 split, the full split, augmentation."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from attnmm.data import MNISTDataModule
from attnmm.data.mnist import random_affine, read_idx


def _write_idx(path: Path, values: np.ndarray) -> None:
    magic = 2051 if values.ndim == 3 else 2049
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in values.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + values.astype(np.uint8).tobytes())


def _mnist(root: Path, parts: tuple[str, ...], n: int) -> Path:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for part in parts:
        images = (np.arange(n)[:, None, None] % 256) * np.ones((1, 28, 28))
        _write_idx(raw / f"{part}-images-idx3-ubyte.gz", images)
        _write_idx(raw / f"{part}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return root


def test_read_idx_round_trip(tmp_path: Path) -> None:
    _write_idx(tmp_path / "x.gz", np.arange(6).reshape(1, 2, 3))
    assert read_idx(tmp_path / "x.gz").tolist() == [[[0, 1, 2], [3, 4, 5]]]
    (tmp_path / "bad").write_bytes(b"\x00\x00\x00\x00")
    with pytest.raises(ValueError, match="not a uint8 IDX file"):
        read_idx(tmp_path / "bad")


def test_truncated_files_are_named_with_the_fix(tmp_path: Path) -> None:
    _write_idx(tmp_path / "x.gz", np.arange(600).reshape(6, 10, 10) % 256)
    whole = (tmp_path / "x.gz").read_bytes()
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])  # an interrupted download
    with pytest.raises(ValueError, match=r"cut.gz could not be decompressed .* download it again"):
        read_idx(tmp_path / "cut.gz")
    raw = gzip.decompress(whole)
    (tmp_path / "cut").write_bytes(raw[:-7])  # decompressed, then cut
    with pytest.raises(ValueError, match=r"cut holds 593 values, its header says \[6, 10, 10\] = 600; .*download"):
        read_idx(tmp_path / "cut")


def test_test_set_only_split(tmp_path: Path, capsys) -> None:
    dm = MNISTDataModule(root=_mnist(tmp_path, ("t10k",), 10000), val_size=500)
    dm.setup()
    assert dm.split == "test-set only" and "first 8,000" in capsys.readouterr().out
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 7500, "val": 500, "test": 2000}
    first_test = dm.datasets["test"][0][0][0, 0, 0]
    assert int(first_test) == 8000 % 256  # the test images are the last 2,000
    batch = next(iter(dm.test_dataloader()))
    assert batch["image"].dtype == torch.float32 and float(batch["image"].max()) <= 1.0


def test_full_split_when_training_files_are_there(tmp_path: Path) -> None:
    dm = MNISTDataModule(root=_mnist(tmp_path, ("t10k", "train"), 3000), val_size=1000)
    dm.setup()
    assert dm.split == "full"
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 2000, "val": 1000, "test": 3000}


def test_missing_files_say_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="MNIST/raw"):
        MNISTDataModule(root=tmp_path).prepare_data()


def test_random_affine_keeps_mass_roughly() -> None:
    images = torch.zeros(8, 1, 28, 28)
    images[:, :, 10:18, 10:18] = 1.0
    out = random_affine(images, generator=torch.Generator().manual_seed(0))
    assert out.shape == images.shape
    assert torch.allclose(out.sum((1, 2, 3)), images.sum((1, 2, 3)), rtol=0.3)
    assert torch.equal(random_affine(images, 0.0, 0.0, 0.0), images)


def test_cifar10_from_torchvision_batches(tmp_path: Path) -> None:
    import pickle

    from attnmm.data.cifar import CIFAR10DataModule

    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"data": np.full((20, 3072), 7, dtype=np.uint8), "labels": list(range(10)) * 2}
        (folder / name).write_bytes(pickle.dumps(entry))
    dm = CIFAR10DataModule(root=tmp_path, val_size=10)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 90, "val": 10, "test": 20}
    assert next(iter(dm.test_dataloader()))["image"].shape == (20, 3, 32, 32)
    with pytest.raises(FileNotFoundError, match="CIFAR-10 not found"):
        CIFAR10DataModule(root=tmp_path / "nowhere").prepare_data()
    batch = (folder / "test_batch").read_bytes()
    (folder / "test_batch").write_bytes(batch[: len(batch) // 2])  # truncated
    with pytest.raises(ValueError, match=r"test_batch is not an intact CIFAR-10 batch .* download it again"):
        CIFAR10DataModule(root=tmp_path, val_size=10).setup()
