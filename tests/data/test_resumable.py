"""ResumableDataLoader: a loader restored from its state hands out the batches an uninterrupted one
would have, and puts back the random state of the save."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnmm._random import get_rng_state, set_rng_state
from attnmm.data._resumable import ResumableDataLoader


def epochs(loader: ResumableDataLoader, n: int) -> list[list[int]]:
    return [b.tolist() for _ in range(n) for b in loader]


class _Unsized(torch.utils.data.Sampler):
    """A shuffling sampler without a length: Lightning then fetches one batch ahead."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())


def _loader(data: list[int], sized: bool) -> ResumableDataLoader:
    if sized:
        return ResumableDataLoader(data, batch_size=4, shuffle=True)
    return ResumableDataLoader(data, batch_size=4, sampler=_Unsized(len(data)))


# a sized loader saved before its first batch is at an epoch end (the next test)
@pytest.mark.parametrize(("trained", "sized"), [(1, True), (3, True), (0, False), (1, False), (3, False)])
def test_resume_mid_epoch_gives_the_uninterrupted_batches(trained: int, sized: bool) -> None:
    data = list(range(20))
    torch.manual_seed(0)
    whole = _loader(data, sized)
    expected = epochs(whole, 3)

    torch.manual_seed(0)
    loader = _loader(data, sized)
    first = [b.tolist() for b in loader]  # epoch 0
    it = iter(loader)
    # Lightning has trained ``trained`` batches, and fetched one more ahead from a loader without a length
    for _ in range(trained + (not sized)):
        next(it, None)
    state = loader.state_dict()
    after_save = torch.get_rng_state()

    torch.manual_seed(123)  # a new process: other random state
    resumed = _loader(data, sized)
    resumed.load_state_dict(state)
    rest = [b.tolist() for b in resumed]
    assert torch.equal(torch.get_rng_state(), after_save)  # the random state of the save is back
    assert first + expected[5 : 5 + trained] + rest == expected[:10]
    assert epochs(resumed, 1) == expected[10:]


def test_resume_at_an_epoch_end_starts_the_next_epoch() -> None:
    torch.manual_seed(0)
    expected = epochs(ResumableDataLoader(list(range(12)), batch_size=4, shuffle=True), 2)
    torch.manual_seed(0)
    loader = ResumableDataLoader(list(range(12)), batch_size=4, shuffle=True)
    assert epochs(loader, 1) == expected[:3]
    state = loader.state_dict()
    torch.manual_seed(5)
    resumed = ResumableDataLoader(list(range(12)), batch_size=4, shuffle=True)
    resumed.load_state_dict(state)
    set_rng_state(state["rng"])  # what RandomState does for an end-of-epoch checkpoint
    assert epochs(resumed, 1) == expected[3:]


def test_state_is_weights_only_safe(tmp_path) -> None:
    loader = ResumableDataLoader(list(range(8)), batch_size=2, shuffle=True)
    next(iter(loader))
    torch.save({"loader": loader.state_dict(), "rng": get_rng_state()}, tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    ResumableDataLoader(list(range(8)), batch_size=2).load_state_dict(state["loader"])
    set_rng_state(state["rng"])


def test_bad_state_is_refused() -> None:
    with pytest.raises(KeyError, match="handed_out"):
        ResumableDataLoader([1, 2]).load_state_dict({"epoch_rng": None})


def _fingerprint(batch: dict) -> list[float]:
    return [float(v.float().sum()) for _, v in sorted(batch.items()) if isinstance(v, torch.Tensor)]


@pytest.mark.data
@pytest.mark.parametrize("name", ["fsdd", "MNIST", "ud_english_ewt"])
def test_recipe_training_loaders_resume_mid_epoch(name: str) -> None:
    from _recipes import data_root

    from attnmm.data import FSDDDataModule, MNISTDataModule, UDPOSDataModule

    root = data_root(name)
    make = {"fsdd": FSDDDataModule, "MNIST": MNISTDataModule, "ud_english_ewt": UDPOSDataModule}[name]
    dm = make(root=root, batch_size=512)
    dm.setup("fit")

    def epoch(loader: Any) -> list[list[float]]:
        return [_fingerprint(b) for b in loader]

    torch.manual_seed(0)
    whole = dm.train_dataloader()
    expected = [epoch(whole) for _ in range(3)]
    torch.manual_seed(0)
    loader = dm.train_dataloader()
    epoch(loader)  # epoch 0 complete: a sampler that counts epochs has moved on
    it = iter(loader)
    for _ in range(2):  # epoch 1: two batches trained (a loader with a length: none fetched ahead)
        next(it)
    state = loader.state_dict()
    torch.manual_seed(7)  # a new process
    resumed = make(root=root, batch_size=512)
    resumed.setup("fit")
    resumed_loader = resumed.train_dataloader()
    resumed_loader.load_state_dict(state)
    assert epoch(resumed_loader) == expected[1][2:]
    assert epoch(resumed_loader) == expected[2]
