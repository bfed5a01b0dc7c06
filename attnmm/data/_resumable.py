"""A DataLoader that resumes mid-epoch (a plain one restarts the epoch from a fresh shuffle)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from attnmm._random import get_rng_state, set_rng_state

__all__ = ["ResumableDataLoader", "SplitLoaders"]


class SplitLoaders(LightningDataModule):
    """A DataModule whose train, validation and test loaders are ``self._loader(split, train)``: a subclass
    says how one split is loaded, ``train`` true for the training loader (shuffled, resumable mid-epoch)."""

    def _loader(self, split: str, train: bool) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _loader(split, train)")

    def train_dataloader(self) -> Any:
        return self._loader("train", True)

    def val_dataloader(self) -> Any:
        return self._loader("val", False)

    def test_dataloader(self) -> Any:
        return self._loader("test", False)


class ResumableDataLoader(DataLoader):
    r"""A :class:`~torch.utils.data.DataLoader` that Lightning can resume mid-epoch.

    Takes the arguments of ``DataLoader`` (so Lightning can rebuild it with a ``DistributedSampler``
    under DDP). Each epoch it records the global random state the shuffle is drawn from and counts
    the batches it hands out; :meth:`state_dict` returns both plus the random state at save time.
    After :meth:`load_state_dict` the next epoch replays the recorded shuffle, skips the batches
    already trained on, and puts back the random state of the save, so a resumed run trains on
    the same batches with the same dropout as one that was never interrupted. A sampler or batch
    sampler with its own ``state_dict``/``load_state_dict`` (e.g. an epoch count) is saved and
    restored along with it.

    Lightning fetches one batch ahead of the one it trains on only from a loader without a length
    (to know which batch is last; with a length it needs not): then at a mid-epoch save one batch
    handed out has not been trained on, and it is handed out again on resume. Not for
    ``persistent_workers=True`` (the worker iterator outlives the epoch).

    Examples:
        >>> loader = ResumableDataLoader(list(range(6)), batch_size=2, shuffle=True)
        >>> it = iter(loader)
        >>> first = next(it)  # Lightning has trained on ``first`` (a loader with a length: no fetch ahead)
        >>> state = loader.state_dict()
        >>> rest = [b.tolist() for b in it]
        >>> loader.load_state_dict(state)
        >>> [b.tolist() for b in loader] == rest
        True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epoch_rng: dict[str, Any] | None = None
        self._handed_out = 0
        self._exhausted = True
        self._to_resume: dict[str, Any] | None = None
        self._epoch_sampler: dict[str, Any] | None = None

    def _stateful_sampler(self) -> Any:
        """The (batch) sampler that keeps state of its own (e.g. an epoch count), if any."""
        for sampler in (self.batch_sampler, self.sampler):
            if callable(getattr(sampler, "state_dict", None)) and callable(getattr(sampler, "load_state_dict", None)):
                return sampler
        return None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator, not a _BaseDataLoaderIter
        resume: dict[str, Any] = self._to_resume or {"exhausted": True}
        self._to_resume = None
        mid_epoch = not resume["exhausted"]
        sampler = self._stateful_sampler()
        if mid_epoch:
            # the shuffle is drawn at the first fetch: from the epoch's state when batches were handed out
            # before the save, else (nothing fetched yet) from the state of the save
            set_rng_state(resume["epoch_rng"] if resume["handed_out"] > 0 else resume["rng"])
            if sampler is not None and resume.get("epoch_sampler") is not None:
                sampler.load_state_dict(resume["epoch_sampler"])
        self._epoch_rng = get_rng_state()
        self._epoch_sampler = sampler.state_dict() if sampler is not None else None
        self._handed_out, self._exhausted = 0, False
        batches = super().__iter__()
        if mid_epoch and resume["handed_out"] > 0:
            # fetch again what was handed out before the save (the shuffle is drawn at the first
            # fetch), then put back the random state of the save; from a loader without a length the
            # last of these batches was only fetched ahead by Lightning, not trained on: hand it out again
            for _ in range(resume["handed_out"]):
                pending = next(batches)
            self._handed_out = resume["handed_out"]
            set_rng_state(resume["rng"])
            if not self._sized():
                yield pending
        for batch in batches:
            self._handed_out += 1
            yield batch
        self._exhausted = True

    def _sized(self) -> bool:  # (with a length, Lightning fetches no batch ahead)
        try:
            len(self)
        except TypeError:
            return False
        return True

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: this epoch's starting random state, batches handed out, and the
        random state now."""
        return {
            "epoch_rng": self._epoch_rng if self._epoch_rng is not None else get_rng_state(),
            "handed_out": self._handed_out,
            "exhausted": self._exhausted,
            "rng": get_rng_state(),
            "epoch_sampler": self._epoch_sampler,
            "sampler": sampler.state_dict() if (sampler := self._stateful_sampler()) is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` at the next ``iter()``."""
        missing = {"epoch_rng", "handed_out", "exhausted", "rng"} - set(state)
        if missing:
            raise KeyError(f"ResumableDataLoader state lacks {sorted(missing)}; was it saved by this class?")
        self._to_resume = state
        sampler = self._stateful_sampler()
        if state["exhausted"] and sampler is not None and state.get("sampler") is not None:
            sampler.load_state_dict(state["sampler"])  # the next epoch goes on from the saved count
