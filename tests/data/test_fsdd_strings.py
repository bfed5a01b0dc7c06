from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from attnmm.data import FSDDStringsDataModule, collate_digit_strings
from attnmm.data.fsdd_strings import PAD_DIGIT

SPEAKERS = ("ann", "bob", "cid")
TAKES = 8  # indices 0-7: 0-4 are the dataset's own test takes


def _value(digit: int, speaker: int, index: int) -> float:
    """The constant sample value of a generated take: it encodes digit, speaker and take."""
    return round(0.01 + 0.06 * digit + 0.02 * speaker + 0.002 * index, 4)


def _write_recordings(recordings: Path) -> None:
    recordings.mkdir(parents=True)
    for s, speaker in enumerate(SPEAKERS):
        for digit in range(10):
            for index in range(TAKES):
                clip = np.full(40 + 3 * digit + index, _value(digit, s, index), dtype=np.float32)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip, 8000, subtype="PCM_16")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    _write_recordings(root / "fsdd" / "recordings")
    return root


def _dm(root: Path, **kwargs) -> FSDDStringsDataModule:
    args = {"root": root, "download": False, "num_train": 60, "num_val": 20, "num_test": 30, "max_gap_ms": 5.0}
    dm = FSDDStringsDataModule(**{**args, **kwargs})
    dm.setup()
    return dm


def _items(dataset) -> list[tuple[list[float], list[int]]]:
    return [(w.tolist(), d) for w, d in (dataset[i] for i in range(len(dataset)))]


def _segments(wave: torch.Tensor) -> list[float]:
    """The constant values of the non-silent runs of a generated string, in order."""
    values, prev = [], 0.0
    for x in wave.tolist():
        if x != 0.0 and x != prev:
            values.append(x)
        prev = x
    return values


def _take_names(dataset) -> list[list[str]]:
    return [[dataset.clips.paths[t].name for t in plan.takes] for plan in dataset.plans]


def test_strings_are_deterministic_and_the_test_set_is_fixed(root: Path) -> None:
    a, b, other = _dm(root), _dm(root), _dm(root, seed=1)
    for split in ("train_set", "val_set", "test_set"):
        assert _items(getattr(a, split)) == _items(getattr(b, split))
    assert _items(a.train_set) != _items(other.train_set)
    assert _items(a.test_set) == _items(other.test_set)  # the training seed leaves the test set alone
    assert _items(a.test_set) != _items(_dm(root, test_seed=5).test_set)


def test_each_string_is_one_speaker_of_one_split(root: Path) -> None:
    dm = _dm(root, num_train=200)
    by_split = {"train": _take_names(dm.train_set), "val": _take_names(dm.val_set), "test": _take_names(dm.test_set)}
    used = {split: {n for names in strings for n in names} for split, strings in by_split.items()}
    assert all(int(n.split("_")[2].removesuffix(".wav")) < 5 for n in used["test"])
    assert all(int(n.split("_")[2].removesuffix(".wav")) >= 5 for n in used["train"] | used["val"])
    assert not (used["train"] & used["val"] or used["train"] & used["test"] or used["val"] & used["test"])
    assert used["val"] <= {p.name for p in dm.val_set.clips.paths}
    for strings in by_split.values():
        assert all(len({n.split("_")[1] for n in names}) == 1 for names in strings)
    assert {n.split("_")[1] for names in by_split["train"] for n in names} == set(SPEAKERS)
    # the digit counts cover 1-7
    assert {len(names) for names in by_split["train"]} == set(range(1, 8))


def test_held_out_speakers_are_only_in_test_strings(root: Path) -> None:
    dm = _dm(root, test_speakers=["bob"])
    assert all(n.split("_")[1] == "bob" for names in _take_names(dm.test_set) for n in names)
    assert not any(n.split("_")[1] == "bob" for names in _take_names(dm.train_set) for n in names)


def test_validation_strings_are_of_the_validation_speakers_only(root: Path) -> None:
    dm = _dm(root, test_speakers=["bob"], val_speakers=["ann"])
    speakers = {
        split: {n.split("_")[1] for names in _take_names(getattr(dm, f"{split}_set")) for n in names}
        for split in ("train", "val", "test")
    }
    assert speakers == {"train": {"cid"}, "val": {"ann"}, "test": {"bob"}}
    with pytest.raises(ValueError, match="in both test_speakers and val_speakers"):
        _dm(root, test_speakers=["bob"], val_speakers=["bob"])


def test_audio_and_targets_match(root: Path) -> None:
    dm = _dm(root, max_gap_ms=2.0)
    for i in range(len(dm.test_set)):
        wave, digits = dm.test_set[i]
        names = _take_names(dm.test_set)[i]
        assert digits == [int(n.split("_")[0]) for n in names]
        expected = []
        for n in names:
            digit, speaker, index = n.removesuffix(".wav").split("_")
            expected.append(_value(int(digit), SPEAKERS.index(speaker), int(index)))
        # PCM16 rounding: the segments equal the takes' values to 1e-4, in order
        assert np.allclose(_segments(wave), expected, atol=1e-4) and len(_segments(wave)) == len(expected)
        plan = dm.test_set.plans[i]
        assert wave.numel() == sum(len(dm.test_set.clips[t][0]) for t in plan.takes) + sum(plan.gaps)
        assert all(0 <= g <= 16 for g in plan.gaps)  # 2 ms at 8 kHz


def test_digit_ends_are_where_each_recording_stops(root: Path) -> None:
    strings = _dm(root, min_digits=3, max_digits=3, max_gap_ms=2.0).test_set
    for i in range(len(strings)):
        wave, digits = strings[i]
        ends, plan = strings.digit_ends(i), strings.plans[i]
        assert len(ends) == len(digits) == 3 and ends == sorted(ends)
        assert ends[-1] + plan.gaps[-1] == wave.numel()  # the trailing silence follows the last digit
        for end, gap, take in zip(ends, plan.gaps[1:], plan.takes, strict=True):
            clip = strings.clips[take][0]
            assert torch.equal(wave[end - clip.numel() : end], clip)
            assert not wave[end : end + gap].any()


def test_batches(root: Path) -> None:
    dm = _dm(root)
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"waveform", "lengths", "targets", "target_lengths"}
    B = batch["waveform"].size(0)
    assert B == 16 and batch["targets"].shape == (B, int(batch["target_lengths"].max()))
    for b in range(B):
        n = int(batch["target_lengths"][b])
        assert (batch["targets"][b, :n] >= 0).all() and (batch["targets"][b, :n] <= 9).all()
        assert (batch["targets"][b, n:] == PAD_DIGIT).all()
        assert (batch["waveform"][b, int(batch["lengths"][b]) :] == 0).all()


def test_collate_pads_targets() -> None:
    batch = collate_digit_strings([(torch.ones(2), [3]), (torch.ones(4), [1, 2, 3])])
    assert batch["targets"].tolist() == [[3, -100, -100], [1, 2, 3]]
    assert batch["target_lengths"].tolist() == [1, 3] and batch["lengths"].tolist() == [2, 4]


def test_max_seconds_cuts_strings_and_noise_is_seeded(root: Path) -> None:
    short = _dm(root, max_seconds=0.02, min_digits=5, max_digits=7)  # 160 samples: about 2-3 takes
    for i in range(len(short.train_set)):
        wave, digits = short.train_set[i]
        assert len(digits) == 1 or wave.numel() <= 160
    noisy, again = _dm(root, noise_std=0.01), _dm(root, noise_std=0.01)
    w1, w2 = noisy.test_set[0][0], again.test_set[0][0]
    assert torch.equal(w1, w2) and not torch.equal(w1, _dm(root).test_set[0][0])
    assert (w1 - _dm(root).test_set[0][0]).std() == pytest.approx(0.01, rel=0.3)


def test_bad_settings_are_named(root: Path) -> None:
    with pytest.raises(ValueError, match="min_digits <= max_digits, got min_digits=3, max_digits=2"):
        FSDDStringsDataModule(root=root, min_digits=3, max_digits=2)
    with pytest.raises(ValueError, match="num_train, num_val and num_test must be >= 1"):
        FSDDStringsDataModule(root=root, num_val=0)
    with pytest.raises(ValueError, match="noise_std >= 0"):
        FSDDStringsDataModule(root=root, noise_std=-1.0)
    dm = FSDDStringsDataModule(root=root, download=False)
    with pytest.raises(RuntimeError, match=r"call dm.setup\('fit'\) first"):
        dm.train_dataloader()
