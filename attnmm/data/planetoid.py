r"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) for full-batch node classification."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from attnmm.data._root import DATA_ENV, resolve_root, writable_copy

NAMES = ("Cora", "CiteSeer", "PubMed")
#: The raw parts of every Planetoid graph, files ``ind.<name>.<part>``.
RAW_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_GEOM_GCN = " and <name>_split_0.6_0.2_<i>.npz from https://github.com/graphdml-uiuc-jlu/geom-gcn (folder splits/)"

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
    ``download=True``. Bad data fails early and leaves the cache clean: a missing or empty raw file is
    named before anything is copied, PyG processes into a staging folder that is renamed into
    ``processed/`` only when complete, and a raw file PyG cannot read is named in the error.

    Args:
        root (str or Path, optional): the base data folder holding ``planetoid/``. (default: :obj:`None`)
        name (str, optional): ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"``. (default: :obj:`"Cora"`)
        split (str, optional): PyG's ``"public"`` (Planetoid's 20 per class / 500 / 1000), ``"full"`` or
            ``"geom-gcn"`` split. (default: :obj:`"public"`)
        normalize_features (bool, optional): row-normalise the bag-of-words features. (default: :obj:`True`)
        download (bool, optional): let PyG download missing raw files. (default: :obj:`False`)
        num_neighbors (list[int], optional): instead of the full batch, mini-batches of
            ``batch_size`` seed nodes with this many neighbours sampled per node and hop, as PyG's
            ``NeighborLoader`` does (:func:`~attnmm.data.neighbors.neighbor_loader`); validation and
            testing take every neighbour over as many hops. For graphs too large for one batch.
            (default: :obj:`None`)
        batch_size (int, optional): seed nodes per mini-batch with ``num_neighbors``. (default: :obj:`256`)

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
        num_neighbors: list[int] | None = None,
        batch_size: int = 256,
    ) -> None:
        super().__init__()
        if name not in NAMES:
            raise ValueError(f"name must be one of {', '.join(NAMES)}, got {name!r}")
        self.root, self.name, self.split = root, name, split
        self.normalize_features, self.download = normalize_features, download
        self.num_neighbors, self.batch_size = num_neighbors, batch_size
        self.data: Any = None
        self._sizes = (0, 0)

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/planetoid``."""
        return resolve_root(self.root, "planetoid")

    @property
    def _subdir(self) -> Path:
        """Where PyG keeps ``raw/`` and ``processed/`` under ``<root>/<name>`` for this split."""
        return Path(self.name, "geom-gcn") if self.split == "geom-gcn" else Path(self.name)

    def raw_file_names(self) -> list[str]:
        r"""The raw files this split needs in ``raw/``: Planetoid's eight ``ind.<name>.*`` files, and
        for ``"geom-gcn"`` its ten split files."""
        names = [f"ind.{self.name.lower()}.{part}" for part in RAW_PARTS]
        if self.split == "geom-gcn":
            names += [f"{self.name.lower()}_split_0.6_0.2_{i}.npz" for i in range(10)]
        return names

    def _missing(self, raw: Path) -> list[str]:
        return [n for n in self.raw_file_names() if not (raw / n).is_file() or (raw / n).stat().st_size == 0]

    def _writable_root(self) -> Path:
        raw = self.dataset_dir / self._subdir / "raw"
        missing = self._missing(raw)
        if not missing:
            copy = writable_copy(self.dataset_dir / self.name, f"planetoid/{self.name}")
            stale = self._missing(copy.parent / self._subdir / "raw")
            if stale:
                raise FileNotFoundError(
                    f"the cached copy {copy} of Planetoid {self.name} lacks {', '.join(stale)} (it was copied "
                    f"from an incomplete folder); delete {copy} to copy the complete {raw} again"
                )
            return copy.parent
        if self.download:  # PyG fetches every raw file into <root>/planetoid/<name>/raw
            self.dataset_dir.mkdir(parents=True, exist_ok=True)
            return self.dataset_dir
        where = (
            f"from https://github.com/kimiyoung/planetoid (folder data/){_GEOM_GCN if self.split == 'geom-gcn' else ''}"
        )
        if len(missing) == len(self.raw_file_names()):
            raise FileNotFoundError(
                f"Planetoid {self.name} not found: no raw files in {raw}. Put the files ind.{self.name.lower()}.* "
                f"(x, tx, allx, y, ty, ally, graph, test.index {where}) there, point root= or ${DATA_ENV} at a "
                f"folder holding planetoid/{self._subdir.as_posix()}/raw, or pass download=True."
            )
        raise FileNotFoundError(
            f"Planetoid {self.name} is incomplete: {raw} lacks {', '.join(missing)} (missing or empty). Copy "
            f"them there {where}, or pass download=True to fetch every raw file; nothing was copied to the cache."
        )

    def _dataset(self) -> Any:
        import torch_geometric.transforms as T
        from torch_geometric.datasets import Planetoid

        root = self._writable_root()
        processed = root / self._subdir / "processed"
        if not (processed / "data.pt").is_file():
            self._process(root)
        for meta in ("pre_transform.pt", "pre_filter.pt"):
            # PyG unpickles these (torch.load with weights_only=False) only to warn when the
            # pre-transform changed; attnmm uses none, and without them nothing is unpickled here
            with contextlib.suppress(OSError):
                (processed / meta).unlink(missing_ok=True)
        transform = T.NormalizeFeatures() if self.normalize_features else None
        try:
            return Planetoid(str(root), self.name, split=self.split, transform=transform)
        except Exception as err:  # a processed file damaged after it was written
            raise RuntimeError(
                f"could not load the processed Planetoid {self.name} from {processed}: {err}; delete {processed} "
                "to process the raw files again"
            ) from err

    def _process(self, root: Path) -> None:
        """Let PyG read the raw files (downloading them when asked) and write ``processed/`` in a staging
        folder next to the target, then rename it into place: a failed or interrupted run leaves nothing
        half-written, and a corrupt raw file is named."""
        from torch_geometric.datasets import Planetoid

        raw, target = root / self._subdir / "raw", root / self._subdir / "processed"
        raw.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.name}-processing-", dir=root / self.name))
        try:
            stage = staging / self._subdir
            stage.mkdir(parents=True)
            os.symlink(raw.resolve(), stage / "raw", target_is_directory=True)  # the raw files, not a copy
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # PyG's notes on processing
                    Planetoid(str(staging), self.name, split=self.split)
            except Exception as err:
                raise self._unreadable(raw, err) from err
            if target.is_dir() and not (target / "data.pt").is_file():
                shutil.rmtree(target)  # left by an interrupted run of an older version
            try:
                os.rename(stage / "processed", target)
            except OSError:
                if not (target / "data.pt").is_file():  # not a lost race with another process
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _unreadable(self, raw: Path, err: Exception) -> Exception:
        """The error for raw files PyG could not process, naming the first file that cannot be read."""
        from torch_geometric.io.planetoid import read_file

        source = self.dataset_dir / self._subdir / "raw"
        for part in RAW_PARTS:
            name = f"ind.{self.name.lower()}.{part}"
            try:
                read_file(str(raw), self.name, part)
            except Exception as cause:
                copied = ""
                if raw.resolve() != source.resolve():  # the cache copy: the original is corrupt too
                    copied = (
                        f" It was copied from {source / name}: replace that one as well, or replace only it and "
                        f"delete the cached copy {raw.parent} so that it is copied again."
                    )
                return RuntimeError(
                    f"Planetoid raw file {raw / name} is corrupt or truncated ({type(cause).__name__}: {cause}); "
                    "replace it with an intact copy from https://github.com/kimiyoung/planetoid (folder data/) and "
                    f"run again (nothing was written to processed/).{copied}"
                )
        return RuntimeError(
            f"could not process the Planetoid {self.name} raw files in {raw} ({type(err).__name__}: {err}); they "
            "do not fit together (from different releases?): replace them with one intact set from "
            "https://github.com/kimiyoung/planetoid (folder data/) (nothing was written to processed/)"
        )

    def prepare_data(self) -> None:
        self._dataset()

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            dataset = self._dataset()
            self.data = dataset[0]
            self._sizes = (dataset.num_features, dataset.num_classes)

    @property
    def num_features(self) -> int:
        """Node features per node (1433 for Cora); read from the graph on first use, so that a
        LightningCLI link (``data.num_features`` -> the model's ``in_channels``) can ask before fitting."""
        self.setup()
        return self._sizes[0]

    @property
    def num_classes(self) -> int:
        """Node classes (7 for Cora); read from the graph on first use, as :attr:`num_features`."""
        self.setup()
        return self._sizes[1]

    def _loader(self, stage: str | None = None) -> DataLoader:
        if self.num_neighbors is None or stage is None:
            return DataLoader([self.data], batch_size=1, collate_fn=_one_graph)
        from attnmm.data.neighbors import neighbor_loader

        hops = self.num_neighbors if stage == "train" else [-1] * len(self.num_neighbors)
        return neighbor_loader(self.data, stage, hops, self.batch_size, shuffle=stage == "train")

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, root={self.dataset_dir.as_posix()!r}, split={self.split!r})"
