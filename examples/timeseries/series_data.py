"""Generated series for the time-series example: four wave shapes to tell apart.

Class 0 is a sine, 1 a square wave, 2 a sawtooth, 3 a triangle wave, each with a random period,
phase, amplitude, length and Gaussian noise. A real dataset would have its own DataModule in
the same form: items in ``setup``, padded batches from ``collate``.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

CLASSES = ("sine", "square", "sawtooth", "triangle")


def make_series(num: int, min_length: int, max_length: int, noise: float, seed: int) -> list[tuple[Tensor, int]]:
    """``num`` (series (T, 1), label) items, reproducible from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(num):
        label = int(torch.randint(0, len(CLASSES), (), generator=g))
        length = int(torch.randint(min_length, max_length + 1, (), generator=g))
        period = 8 + 24 * float(torch.rand((), generator=g))
        phase = float(torch.rand((), generator=g))
        t = torch.arange(length) / period + phase
        frac = t - t.floor()
        wave = [torch.sin(2 * math.pi * t), torch.sign(frac - 0.5), 2 * frac - 1, 4 * (frac - 0.5).abs() - 1][label]
        amplitude = 0.5 + float(torch.rand((), generator=g))
        series = amplitude * wave + noise * torch.randn(length, generator=g)
        items.append((series.unsqueeze(-1), label))
    return items


def collate(items: list[tuple[Tensor, int]]) -> dict[str, Tensor]:
    """Zero-pad the series to the longest: ``series`` (B, T, 1), ``lengths`` (B,), ``label`` (B,)."""
    lengths = torch.tensor([s.size(0) for s, _ in items])
    series = torch.zeros(len(items), int(lengths.max()), 1)
    for b, (s, _) in enumerate(items):
        series[b, : s.size(0)] = s
    return {"series": series, "lengths": lengths, "label": torch.tensor([y for _, y in items])}


class WaveShapesDataModule(L.LightningDataModule):
    """Train, validation and test splits of generated wave shapes (see :func:`make_series`).

    Args:
        num_train (int, optional): training series. (default: :obj:`2000`)
        num_val (int, optional): validation series. (default: :obj:`400`)
        num_test (int, optional): test series. (default: :obj:`400`)
        min_length (int, optional): shortest series. (default: :obj:`64`)
        max_length (int, optional): longest series. (default: :obj:`256`)
        noise (float, optional): standard deviation of the added noise. (default: :obj:`0.3`)
        batch_size (int, optional): series per batch. (default: :obj:`32`)
        seed (int, optional): seed of the generator; the splits use seed, seed + 1, seed + 2.
            (default: :obj:`0`)
    """

    num_classes: int = len(CLASSES)

    def __init__(
        self,
        num_train: int = 2000,
        num_val: int = 400,
        num_test: int = 400,
        min_length: int = 64,
        max_length: int = 256,
        noise: float = 0.3,
        batch_size: int = 32,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.min_length, self.max_length, self.noise = min_length, max_length, noise
        self.batch_size, self.seed = batch_size, seed
        self.splits: dict[str, list[tuple[Tensor, int]]] = {}

    def setup(self, stage: str | None = None) -> None:
        for i, (split, num) in enumerate(self.sizes.items()):
            if split not in self.splits:
                self.splits[split] = make_series(num, self.min_length, self.max_length, self.noise, self.seed + i)

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader[Any]:
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=shuffle, collate_fn=collate)

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader[Any]:
        return self._loader("test")
