r"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) for full-batch node classification."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from attnmm.data._root import DATA_ENV, resolve_root, writable_copy

NAMES = ("Cora", "CiteSeer", "PubMed")

__all__ = ["NAMES", "PlanetoidDataModule"]


def _one_graph(items: list[Any]) -> Any:
    return items[0]


class PlanetoidDataModule(LightningDataModule):
    r"""A Planetoid citation graph (Yang et al., 2016) as one full batch: every step sees the whole
    graph, and the split is given by its ``train_mask``, ``val_mask`` and ``test_mask``, which
    :class:`~attnmm.lightning.ClassificationTask` applies per stage. Targets are ``y``.

    Raw files are read from ``<root>/planetoid/<name>/raw`` (``root`` resolved by
    :func:`~attnmm.data.resolve_root`: ``$ATTNMM_DATA``, then ``~/.cache/attnmm``). PyG writes processed
    files next to them, so a read-only folder is first copied to the writable cache
    (:func:`~attnmm.data.writable_copy`, ``$ATTNMM_CACHE``). Missing data is downloaded by PyG when
    ``download=True``.

    Args:
        root (str or Path, optional): the base data folder holding ``planetoid/``. (default: :obj:`None`)
        name (str, optional): ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"``. (default: :obj:`"Cora"`)
        split (str, optional): PyG's ``"public"`` (Planetoid's 20 per class / 500 / 1000), ``"full"`` or
            ``"geom-gcn"`` split. (default: :obj:`"public"`)
        normalize_features (bool, optional): row-normalise the bag-of-words features. (default: :obj:`True`)
        download (bool, optional): let PyG download missing raw files. (default: :obj:`False`)

    Examples:
        >>> dm = PlanetoidDataModule(root="/data", name="CiteSeer")
        >>> dm
        PlanetoidDataModule(name='CiteSeer', root='/data/planetoid', split='public')
    """

    def __init__(
        self,
        root: str | Path | None = None,
        name: str = "Cora",
        split: Literal["public", "full", "geom-gcn"] = "public",
        normalize_features: bool = True,
        download: bool = False,
    ) -> None:
        super().__init__()
        if name not in NAMES:
            raise ValueError(f"name must be one of {', '.join(NAMES)}, got {name!r}")
        self.root, self.name, self.split = root, name, split
        self.normalize_features, self.download = normalize_features, download
        self.data: Any = None

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/planetoid``."""
        return resolve_root(self.root, "planetoid")

    def _writable_root(self) -> Path:
        raw = self.dataset_dir / self.name / "raw"
        if raw.is_dir() and any(raw.iterdir()):
            return writable_copy(self.dataset_dir / self.name, f"planetoid/{self.name}").parent
        if not self.download:
            raise FileNotFoundError(
                f"Planetoid {self.name} not found: no raw files in {raw}. Put the files ind.{self.name.lower()}.* "
                f"(x, tx, allx, y, ty, ally, graph, test.index from https://github.com/kimiyoung/planetoid, "
                f"folder data/) there, point root= or ${DATA_ENV} at a folder holding planetoid/{self.name}/raw, "
                "or pass download=True."
            )
        self.dataset_dir.mkdir(parents=True, exist_ok=True)
        return self.dataset_dir

    def _dataset(self) -> Any:
        import torch_geometric.transforms as T
        from torch_geometric.datasets import Planetoid

        transform = T.NormalizeFeatures() if self.normalize_features else None
        return Planetoid(str(self._writable_root()), self.name, split=self.split, transform=transform)

    def prepare_data(self) -> None:
        self._dataset()

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            dataset = self._dataset()
            self.data = dataset[0]
            self.num_features, self.num_classes = dataset.num_features, dataset.num_classes

    def _loader(self) -> DataLoader:
        return DataLoader([self.data], batch_size=1, collate_fn=_one_graph)

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    def predict_dataloader(self) -> DataLoader:
        return self._loader()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, root={self.dataset_dir.as_posix()!r}, split={self.split!r})"
