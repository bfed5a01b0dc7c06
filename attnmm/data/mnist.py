r"""MNIST handwritten digits: the offline 10k test set split 8,000 / 2,000, or the full 60k / 10k."""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from attnmm.data._resumable import ResumableDataLoader, SplitLoaders
from attnmm.data._root import DATA_ENV, resolve_root

__all__ = ["MNISTDataModule", "random_affine", "read_idx"]

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_MAGIC = {3: 2051, 1: 2049}  # IDX magic numbers of uint8 image (3-D) and label (1-D) files


def read_idx(path: str | Path) -> Tensor:
    r"""A uint8 IDX file (MNIST's format, plain or ``.gz``) as a tensor: (N, rows, cols) images or
    (N,) labels.

    Raises:
        ValueError: the file is a damaged gzip stream, its header is not that of a uint8 IDX file, or
            its size does not match the header; the message names the file and the fix.
    """
    path = Path(path)
    fix = "the file is truncated or corrupt: download it again (torchvision.datasets.MNIST(root, download=True))"
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as handle:
            data = handle.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # a cut or damaged gzip stream
        raise ValueError(f"{path} could not be decompressed ({err}); {fix}") from err
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xFF
    if magic != _MAGIC.get(ndim):
        raise ValueError(f"{path} is not a uint8 IDX file: magic number {magic}, expected 2051 or 2049; {fix}")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(data, dtype=np.uint8, offset=min(4 + 4 * ndim, len(data)))
    if body.size != math.prod(dims):
        raise ValueError(f"{path} holds {body.size} values, its header says {dims} = {math.prod(dims)}; {fix}")
    return torch.from_numpy(body.copy()).view(*dims)


def random_affine(
    images: Tensor, max_shift: float = 2.0, max_degrees: float = 10.0, max_scale: float = 0.1,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Randomly shift, rotate and scale each image of a batch (bilinear, zeros outside).

    Args:
        images (Tensor): (B, C, height, width) floats.
        max_shift (float, optional): largest shift in pixels per axis. (default: :obj:`2.0`)
        max_degrees (float, optional): largest rotation either way. (default: :obj:`10.0`)
        max_scale (float, optional): largest relative zoom either way. (default: :obj:`0.1`)
        generator (torch.Generator, optional): random source. (default: :obj:`None`)

    Examples:
        >>> import torch
        >>> random_affine(torch.rand(4, 1, 28, 28)).shape
        torch.Size([4, 1, 28, 28])
    """
    B, _, h, w = images.shape
    u = torch.rand(B, 4, generator=generator).to(images.device) * 2 - 1  # (B, 4) in [-1, 1]
    angle = u[:, 0] * math.radians(max_degrees)
    scale = 1 + u[:, 1] * max_scale
    cos, sin = angle.cos() / scale, angle.sin() / scale
    shift_x, shift_y = u[:, 2] * 2 * max_shift / w, u[:, 3] * 2 * max_shift / h
    theta = torch.stack(
        [torch.stack([cos, -sin, shift_x], 1), torch.stack([sin, cos, shift_y], 1)], dim=1
    )  # (B, 2, 3): output -> input coordinates in [-1, 1]
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class MNISTDataModule(SplitLoaders):
    r"""MNIST handwritten digits (LeCun, Cortes and Burges), 28 x 28 grey images of 10 digits.

    IDX files (plain or ``.gz``) are read from ``<root>/MNIST/raw``, ``root`` resolved by
    :func:`~attnmm.data.resolve_root` (the layout torchvision's ``MNIST(root)`` downloads to). Two
    splits, chosen by which files are there:

    - **full** (all four files, as torchvision downloads them): the 60,000 training images train
      and validate (the last ``val_size`` validate), and the 10,000 test images test;
    - **test-set only** (only ``t10k-*``, as in the offline copy of the test set): the **first
      8,000 test images train and validate** (the last ``val_size`` of them validate) and the
      **last 2,000 are the test set**. No image is in two splits; the scores are not comparable
      with full-MNIST results.

    :attr:`split` says which was used, and :meth:`setup` prints it. Batches: ``image`` (B, 1, 28,
    28) floats in [0, 1] and ``label`` (B,). With ``augment``, training images are randomly
    shifted, rotated and scaled (:func:`random_affine`) after they reach the device.

    Args:
        root (str or Path, optional): the base data folder holding ``MNIST/raw``. (default: :obj:`None`)
        batch_size (int, optional): images per batch. (default: ``128``)
        val_size (int, optional): images kept from training for validation. (default: ``1000``)
        augment (bool, optional): random affine augmentation of training batches. (default: :obj:`True`)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)

    Examples:
        >>> dm = MNISTDataModule(root="/data")
        >>> dm
        MNISTDataModule(root='/data/MNIST', batch_size=128)
        >>> dm.num_classes, dm.image_size
        (10, (1, 28, 28))
    """

    num_classes: int = 10
    image_size: tuple[int, int, int] = (1, 28, 28)
    #: Split of the test-set-only layout: the first 8,000 test images train and validate.
    TEST_ONLY_TRAIN = 8000

    def __init__(
        self, root: str | Path | None = None, batch_size: int = 128, val_size: int = 1000, augment: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1 or num_workers < 0 or val_size < 1:
            raise ValueError(
                f"need batch_size >= 1, val_size >= 1, num_workers >= 0, got {batch_size}, {val_size}, {num_workers}"
            )
        if val_size >= self.TEST_ONLY_TRAIN:
            raise ValueError(f"val_size must be < {self.TEST_ONLY_TRAIN} (images left to train on), got {val_size}")
        self.root, self.batch_size, self.val_size = root, batch_size, val_size
        self.augment, self.num_workers = augment, num_workers
        self.split: str | None = None
        self.datasets: dict[str, TensorDataset] = {}

    @property
    def raw_dir(self) -> Path:
        r"""``<root>/MNIST/raw``."""
        return resolve_root(self.root, "MNIST") / "raw"

    def _find(self, stem: str) -> Path | None:
        for name in (stem, stem + ".gz"):
            if (self.raw_dir / name).is_file():
                return self.raw_dir / name
        return None

    def _pair(self, part: str) -> tuple[Tensor, Tensor] | None:
        paths = [self._find(stem) for stem in _FILES[part]]
        if None in paths:
            return None
        images, labels = (read_idx(p) for p in paths if p is not None)
        if images.size(0) != labels.size(0):
            raise ValueError(f"{paths[0]} has {images.size(0)} images but {paths[1]} has {labels.size(0)} labels")
        return images.unsqueeze(1), labels.long()  # (N, 1, 28, 28), (N,)

    def prepare_data(self) -> None:
        if self._find(_FILES["test"][0]) is None or self._find(_FILES["test"][1]) is None:
            raise FileNotFoundError(
                f"MNIST not found: no t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] in {self.raw_dir}. "
                f"Put the IDX files there (torchvision.datasets.MNIST(root, download=True) writes this layout), "
                f"or point root= or ${DATA_ENV} at the folder holding MNIST/raw"
            )

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.prepare_data()
        test, train = self._pair("test"), self._pair("train")
        assert test is not None
        if train is not None:
            self.split = "full"
            self._set_datasets(*train, *test)
        else:
            self.split, n = "test-set only", self.TEST_ONLY_TRAIN
            self._set_datasets(test[0][:n], test[1][:n], test[0][n:], test[1][n:])

    def _set_datasets(self, images: Tensor, labels: Tensor, test_images: Tensor, test_labels: Tensor) -> None:
        """The last ``val_size`` of the training images validate."""
        k = images.size(0) - self.val_size
        train, val = TensorDataset(images[:k], labels[:k]), TensorDataset(images[k:], labels[k:])
        self.datasets = {"train": train, "val": val, "test": TensorDataset(test_images, test_labels)}
        self._say_split()

    @rank_zero_only
    def _say_split(self) -> None:
        sizes = ", ".join(f"{k} {len(v)}" for k, v in self.datasets.items())
        where = "the 60k training images train/validate, the 10k test images test" if self.split == "full" else (
            "only the 10k test set is here: its first 8,000 images train/validate, the last 2,000 test"
        )
        print(f"MNIST ({self.split}): {where}; {sizes}")

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        # training: resumable mid-epoch (the same batches after a crash and resume)
        return (ResumableDataLoader if shuffle else DataLoader)(
            self.datasets[split], self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
            collate_fn=_collate, drop_last=shuffle and len(self.datasets[split]) > self.batch_size,
        )

    def on_after_batch_transfer(self, batch: dict[str, Tensor], dataloader_idx: int) -> dict[str, Tensor]:
        trainer = self.trainer
        if self.augment and trainer is not None and trainer.training:
            batch = {**batch, "image": random_affine(batch["image"])}
        return batch

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={len(v)}" for k, v in self.datasets.items())
        return f"{type(self).__name__}(root={self.raw_dir.parent.as_posix()!r}, batch_size={self.batch_size}{sizes})"


def _collate(items: list[tuple[Tensor, Tensor]]) -> dict[str, Any]:
    images = torch.stack([im for im, _ in items]).float() / 255.0  # (B, 1, 28, 28)
    return {"image": images, "label": torch.stack([lb for _, lb in items])}
