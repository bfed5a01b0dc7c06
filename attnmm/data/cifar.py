r"""CIFAR-10 from torchvision's files: 32 x 32 colour images of 10 classes."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor

from attnmm.data._root import DATA_ENV, resolve_root
from attnmm.data.mnist import MNISTDataModule

__all__ = ["CIFAR10DataModule", "read_cifar_batch"]

_FOLDER = "cifar-10-batches-py"
_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))


def read_cifar_batch(path: str | Path) -> tuple[Tensor, Tensor]:
    r"""One pickled CIFAR-10 batch file: uint8 images (N, 3, 32, 32) and labels (N,).

    The files are Python pickles (the format CIFAR-10 is distributed in); read only files you trust.

    Raises:
        ValueError: the file is truncated or is not a CIFAR-10 batch; the message names it and the fix.
    """
    try:
        with open(path, "rb") as handle:
            entry = pickle.load(handle, encoding="latin1")
        images = torch.from_numpy(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).copy())
        labels = torch.as_tensor(entry["labels"], dtype=torch.long)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"{path} is not an intact CIFAR-10 batch ({type(err).__name__}: {err}); the file is truncated or "
            "corrupt: download it again (torchvision.datasets.CIFAR10(root, download=True))"
        ) from err
    return images, labels


class CIFAR10DataModule(MNISTDataModule):
    r"""CIFAR-10 (Krizhevsky, 2009): 60,000 32 x 32 colour images of 10 classes, read from the
    pickled batches torchvision's ``CIFAR10(root, download=True)`` writes to
    ``<root>/cifar10/cifar-10-batches-py`` (``root`` resolved by :func:`~attnmm.data.resolve_root`).

    The 50,000 training images train and validate (the last ``val_size`` validate), the 10,000
    test images test. Batches and augmentation are those of :class:`MNISTDataModule`: ``image``
    (B, 3, 32, 32) floats in [0, 1], ``label`` (B,).

    Args:
        root (str or Path, optional): the base data folder holding ``cifar10/``. (default: :obj:`None`)
        batch_size (int, optional): images per batch. (default: ``128``)
        val_size (int, optional): training images kept for validation. (default: ``1000``)
        augment (bool, optional): random affine augmentation of training batches. (default: :obj:`True`)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)

    Examples:
        >>> CIFAR10DataModule(root="/data").image_size
        (3, 32, 32)
    """

    image_size: tuple[int, int, int] = (3, 32, 32)

    @property
    def batches_dir(self) -> Path:
        r"""``<root>/cifar10/cifar-10-batches-py``."""
        return resolve_root(self.root, "cifar10") / _FOLDER

    def prepare_data(self) -> None:
        missing = [n for n in (*_TRAIN, "test_batch") if not (self.batches_dir / n).is_file()]
        if missing:
            raise FileNotFoundError(
                f"CIFAR-10 not found: {', '.join(missing)} missing in {self.batches_dir}. Run "
                f"torchvision.datasets.CIFAR10('{self.batches_dir.parent}', download=True) once, or point "
                f"root= or ${DATA_ENV} at the folder holding cifar10/{_FOLDER}"
            )

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.prepare_data()
        parts = [read_cifar_batch(self.batches_dir / n) for n in _TRAIN]
        images, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        test_images, test_labels = read_cifar_batch(self.batches_dir / "test_batch")
        self.split = "full"
        self._set_datasets(images, labels, test_images, test_labels)

    @rank_zero_only
    def _say_split(self) -> None:
        print("CIFAR-10: " + ", ".join(f"{k} {len(v)}" for k, v in self.datasets.items()))

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={len(v)}" for k, v in self.datasets.items())
        root = self.batches_dir.parent.as_posix()
        return f"{type(self).__name__}(root={root!r}, batch_size={self.batch_size}{sizes})"
