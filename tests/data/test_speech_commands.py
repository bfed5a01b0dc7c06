from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import soundfile
import torch

import attnmm.data.speech_commands as sc_module
from attnmm.data import AudioBatch, SpeechCommandsDataModule, collate_audio
from attnmm.data.speech_commands import CORE_COMMANDS, scan_speech_commands

WORDS = (*CORE_COMMANDS, "bed")


def _write_dataset(base: Path) -> Path:
    version_dir = base / "SpeechCommands" / "speech_commands_v0.02"
    for w, word in enumerate(WORDS):
        (version_dir / word).mkdir(parents=True)
        for s in range(3):
            # a constant clip whose value encodes the word and speaker
            clip = np.full(100 + 10 * w + s, 0.02 * (w + 1), dtype=np.float32)
            soundfile.write(version_dir / word / f"spk{s}_nohash_0.wav", clip, 16000, subtype="PCM_16")
    noise = version_dir / "_background_noise_"
    noise.mkdir()
    soundfile.write(noise / "white_noise.wav", np.zeros(16000, dtype=np.float32), 16000, subtype="PCM_16")
    (noise / "README.md").write_text("noise")
    (version_dir / "validation_list.txt").write_text("".join(f"{w}/spk1_nohash_0.wav\n" for w in WORDS))
    (version_dir / "testing_list.txt").write_text("".join(f"{w}/spk2_nohash_0.wav\n" for w in WORDS) + "\n")
    return version_dir


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    _write_dataset(root)
    return root


def test_scan_uses_the_list_files(root: Path) -> None:
    splits = scan_speech_commands(root / "SpeechCommands" / "speech_commands_v0.02")
    assert {k: len(v) for k, v in splits.items()} == {"train": 11, "val": 11, "test": 11}
    for speaker, split in enumerate(["train", "val", "test"]):
        assert all(rel.endswith(f"spk{speaker}_nohash_0.wav") for rel, _ in splits[split])
    assert not any("_background_noise_" in rel for clips in splits.values() for rel, _ in clips)


def test_core_commands(root: Path) -> None:
    dm = SpeechCommandsDataModule(root=root)
    dm.setup()
    assert dm.class_names == CORE_COMMANDS and dm.num_classes == 10 and dm.sample_rate == 16000
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (10, 10, 10)  # "bed" is dropped
    for dataset, speaker in [(dm.train_set, "spk0"), (dm.val_set, "spk1"), (dm.test_set, "spk2")]:
        for path, label in zip(dataset.paths, dataset.labels):
            assert path.parent.name == CORE_COMMANDS[label] and path.name.startswith(speaker)


def test_batches(root: Path) -> None:
    dm = SpeechCommandsDataModule(root=root, batch_size=4)
    dm.setup("fit")
    assert dm.test_set is None
    batch = next(iter(dm.val_dataloader()))
    assert set(batch) == set(AudioBatch.__annotations__)
    assert batch["waveform"].shape == (4, int(batch["lengths"].max())) and batch["waveform"].dtype == torch.float32
    assert len(set(batch["label"].tolist())) == 4
    for b in range(4):
        n, y = int(batch["lengths"][b]), int(batch["label"][b])
        assert n == 101 + 10 * y
        assert torch.allclose(batch["waveform"][b, :n], torch.full((n,), 0.02 * (y + 1)), atol=1e-4)
        assert torch.all(batch["waveform"][b, n:] == 0)


def test_unknown_class_and_custom_labels(root: Path) -> None:
    dm = SpeechCommandsDataModule(root=root, labels=["bed", "yes"], include_unknown=True)
    dm.setup("test")
    assert dm.class_names == ("bed", "yes", "_unknown_") and dm.num_classes == 3
    words = {path.parent.name: label for path, label in zip(dm.test_set.paths, dm.test_set.labels)}
    assert words["bed"] == 0 and words["yes"] == 1 and words["go"] == 2 and len(words) == 11


def test_absent_label_lists_words(root: Path) -> None:
    with pytest.raises(ValueError, match=r"\['marvin'\] have no clips.*'bed'"):
        SpeechCommandsDataModule(root=root, labels=["yes", "marvin"]).setup()


@pytest.mark.parametrize("labels", [[], ["yes", "yes"], ["_unknown_"]])
def test_bad_labels(labels: list[str]) -> None:
    with pytest.raises(ValueError, match="distinct words"):
        SpeechCommandsDataModule(labels=labels)


def test_missing_data_says_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(base: Path) -> None:
        raise AssertionError("download attempted with download=False")

    monkeypatch.setattr(sc_module, "download_speech_commands", forbidden)
    dm = SpeechCommandsDataModule(root=tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(tmp_path / "SpeechCommands" / "speech_commands_v0.02") in message
    assert "download=True" in message and "ATTNMM_DATA" in message and "testing_list.txt" in message


def test_missing_list_file_is_named(tmp_path: Path) -> None:
    (_write_dataset(tmp_path) / "testing_list.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing testing_list.txt \(download=False"):
        SpeechCommandsDataModule(root=tmp_path).setup()


def test_download_failure_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(base: Path) -> None:
        raise OSError("Name or service not known")

    monkeypatch.setattr(sc_module, "download_speech_commands", offline)
    with pytest.raises(FileNotFoundError, match="failed: Name or service not known"):
        SpeechCommandsDataModule(root=tmp_path, download=True).prepare_data()


def test_download_goes_to_the_base_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(base: Path) -> None:
        calls.append(Path(base))
        _write_dataset(Path(base))

    monkeypatch.setattr(sc_module, "download_speech_commands", fake)
    dm = SpeechCommandsDataModule(root=tmp_path, download=True)
    dm.prepare_data()
    dm.setup()
    assert calls == [tmp_path] and len(dm.train_set) == 10


def test_wrong_rate_file_is_named(tmp_path: Path) -> None:
    version_dir = _write_dataset(tmp_path)
    soundfile.write(version_dir / "yes" / "spk0_nohash_0.wav", np.zeros(50), 8000)
    dm = SpeechCommandsDataModule(root=tmp_path, batch_size=32)
    dm.setup("fit")
    with pytest.raises(ValueError, match="spk0_nohash_0.wav has sample rate 8000 Hz, expected 16000 Hz"):
        next(iter(dm.train_dataloader()))


def test_repr(root: Path) -> None:
    dm = SpeechCommandsDataModule(root=root)
    base = (root / "SpeechCommands" / "speech_commands_v0.02").as_posix()
    assert repr(dm) == f"SpeechCommandsDataModule(root='{base}', layout='full', classes=10, batch_size=64)"
    dm.setup("test")
    sizes = "train=10 (1 speaker), val=10 (1 speaker), test=10 (1 speaker)"
    assert repr(dm) == f"SpeechCommandsDataModule(root='{base}', layout='full', classes=10, batch_size=64, {sizes})"


class _FakeTorchaudio:
    """Stands in for torchaudio's SPEECHCOMMANDS downloader: 'downloads' the archive into its root, then
    extracts there, failing halfway when ``fail`` is set."""

    calls: ClassVar[list[Path]] = []
    fail: ClassVar[bool] = False

    def __init__(self, root: str, url: str, folder_in_archive: str, download: bool) -> None:
        root_path = Path(root)
        type(self).calls.append(root_path)
        archive = root_path / f"{url}.tar.gz"
        if not archive.is_file():
            archive.write_bytes(b"archive")
        version_dir = root_path / folder_in_archive / url
        if type(self).fail:
            (version_dir / "yes").mkdir(parents=True)
            (version_dir / "validation_list.txt").write_text("yes/a.wav\n")
            raise OSError("No space left on device")
        _write_dataset(root_path)


def test_download_never_leaves_a_partial_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchaudio.datasets

    monkeypatch.setattr(torchaudio.datasets, "SPEECHCOMMANDS", _FakeTorchaudio)
    _FakeTorchaudio.calls, _FakeTorchaudio.fail = [], True
    with pytest.raises(FileNotFoundError, match="No space left on device"):
        SpeechCommandsDataModule(root=tmp_path, download=True).prepare_data()
    # the half-extracted tree went with the staging folder; the complete archive is kept for a retry
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speech_commands_v0.02.tar.gz"]
    _FakeTorchaudio.fail = False
    dm = SpeechCommandsDataModule(root=tmp_path, download=True)
    dm.prepare_data()
    dm.setup()
    assert len(dm.train_set) == 10 and len(_FakeTorchaudio.calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SpeechCommands", "speech_commands_v0.02.tar.gz"]


def test_an_incomplete_extraction_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchaudio.datasets

    monkeypatch.setattr(torchaudio.datasets, "SPEECHCOMMANDS", _FakeTorchaudio)
    (tmp_path / "SpeechCommands" / "speech_commands_v0.02" / "yes").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"speech_commands_v0.02 exists but lacks .* Delete it"):
        SpeechCommandsDataModule(root=tmp_path, download=True).prepare_data()


# ------------------------------------------------------------------ the 12-class layout, speakers disjoint

TWELVE = (*CORE_COMMANDS, "_unknown_", "_silence_")
SPEAKERS = tuple(f"spk{i:02d}" for i in range(10))
SILENCE_CLIPS = 20


def _noise_clip(n: int, length: int = 1600) -> np.ndarray:
    return (0.1 * np.random.default_rng(1000 + n).standard_normal(length)).astype(np.float32)


def _write_classes(folder: Path, speakers: tuple[str, ...] = SPEAKERS, silence: range = range(SILENCE_CLIPS)) -> Path:
    """The 12 class folders: each speaker says every core word once and one other word ('bed' or 'cat');
    ``_silence_`` holds noise clips ``<n>.wav`` (1,600 samples of seeded noise, distinct per n)."""
    for w, word in enumerate(CORE_COMMANDS):
        (folder / word).mkdir(parents=True, exist_ok=True)
        for s, speaker in enumerate(speakers):
            clip = np.full(100 + 10 * w + s, 0.02 * (w + 1), dtype=np.float32)  # the value encodes the word
            soundfile.write(folder / word / f"{speaker}_nohash_0.wav", clip, 16000, subtype="PCM_16")
    (folder / "_unknown_").mkdir(exist_ok=True)
    for s, speaker in enumerate(speakers):
        word = ("bed", "cat")[s % 2]
        clip = np.full(90, 0.5, dtype=np.float32)
        soundfile.write(folder / "_unknown_" / f"{word}_{speaker}_nohash_1.wav", clip, 16000, subtype="PCM_16")
    (folder / "_silence_").mkdir(exist_ok=True)
    for n in silence:
        soundfile.write(folder / "_silence_" / f"{n}.wav", _noise_clip(n), 16000, subtype="PCM_16")
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder holding speech_commands_test_v0.02/ (10 speakers, 20 silence clips)."""
    base = tmp_path_factory.mktemp("classes")
    _write_classes(base / "speech_commands_test_v0.02")
    return base


@pytest.fixture(scope="module")
def classes(base: Path) -> Path:
    return base / "speech_commands_test_v0.02"


def _speakers_of(dataset) -> set[str]:
    return {s for s in dataset.speakers if s is not None}


def _silence_of(dataset) -> set[str]:
    return {Path(p).name for p in dataset.paths if Path(p).parent.name == "_silence_"}


def test_classes_layout_is_found(base: Path, classes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNMM_DATA", str(base))
    for dm in (
        SpeechCommandsDataModule(root=classes),  # the folder holding the class folders
        SpeechCommandsDataModule(root=base),  # a base folder holding speech_commands_test_v0.02/
        SpeechCommandsDataModule(),  # $ATTNMM_DATA
        SpeechCommandsDataModule(root=classes, layout="classes"),
    ):
        assert dm.dataset_layout == "classes" and dm.dataset_dir == classes
        assert dm.class_names == TWELVE and dm.num_classes == 12 and dm.sample_rate == 16000
    with pytest.raises(FileNotFoundError, match=r"missing .*speech_commands_v0.02/ \(download=False.*root= at"):
        SpeechCommandsDataModule(root=classes, layout="full").setup()
    with pytest.raises(FileNotFoundError, match="class folders not found"):
        SpeechCommandsDataModule(root=classes / "yes", layout="classes").setup()


def test_twelve_classes_in_order(classes: Path) -> None:
    dm = SpeechCommandsDataModule(root=classes, val_fraction=0.0, test_fraction=0.0)
    dm.setup("fit")
    assert len(dm.train_set) == 10 * 10 + 10 + SILENCE_CLIPS and len(dm.val_set) == 0
    for path, label in zip(dm.train_set.paths, dm.train_set.labels):
        folder = Path(path).parent.name
        assert dm.class_names[label] == folder  # a word, then _unknown_ (10), then _silence_ (11)
    assert {dm.class_names[y] for y in dm.train_set.labels} == set(TWELVE)
    batch = next(iter(dm.val_dataloader() if len(dm.val_set) else dm.train_dataloader()))
    for b in range(len(batch["label"])):
        n, y = int(batch["lengths"][b]), int(batch["label"][b])
        if y < 10:
            assert torch.allclose(batch["waveform"][b, :n], torch.full((n,), 0.02 * (y + 1)), atol=1e-4)
        assert not batch["waveform"][b, n:].any()
    # the options keep today's meaning
    eleven = SpeechCommandsDataModule(root=classes, include_silence=False)
    assert eleven.class_names == (*CORE_COMMANDS, "_unknown_")
    words = SpeechCommandsDataModule(root=classes, labels=["bed", "yes"], include_unknown=False, include_silence=False)
    words.setup("fit")
    found = {Path(p).name.split("_")[0] if Path(p).parent.name == "_unknown_" else Path(p).parent.name
             for p in words.train_set.paths + words.val_set.paths}
    assert words.class_names == ("bed", "yes") and found == {"bed", "yes"}  # bed from _unknown_/bed_*.wav


def test_speakers_are_disjoint_and_reported(classes: Path) -> None:
    dm = SpeechCommandsDataModule(root=classes, val_fraction=0.2, test_fraction=0.3, seed=0)
    dm.setup()
    train, val, test = (_speakers_of(s) for s in (dm.train_set, dm.val_set, dm.test_set))
    assert (len(train), len(val), len(test)) == (5, 2, 3)
    assert not (train & val or train & test or val & test) and train | val | test == set(SPEAKERS)
    assert dm.speakers == list(SPEAKERS)
    assert dm.split_speakers == {"train": sorted(train), "val": sorted(val), "test": sorted(test)}
    assert (dm.train_set.num_speakers, dm.val_set.num_speakers, dm.test_set.num_speakers) == (5, 2, 3)
    # every clip of a speaker is in that speaker's split
    for dataset, speakers in ((dm.train_set, train), (dm.val_set, val), (dm.test_set, test)):
        assert all(s in speakers for s in dataset.speakers if s is not None)
        assert len([s for s in dataset.speakers if s is not None]) == 11 * len(speakers)
    # silence clips, without a speaker, split by the same fractions: round(20 * 0.3) test, round(20 * 0.2) val
    silence = [_silence_of(s) for s in (dm.train_set, dm.val_set, dm.test_set)]
    assert [len(s) for s in silence] == [10, 4, 6] and len(set.union(*silence)) == SILENCE_CLIPS
    assert repr(dm).endswith("train=65 (5 speakers), val=26 (2 speakers), test=39 (3 speakers))")
    assert "layout='classes', classes=12" in repr(dm)
    assert repr(dm.test_set) == "AudioClips(clips=39, speakers=3, sample_rate=16000)"
    summary = dm.summary()
    assert str(dm) == summary and "130 clips of 10 speakers" in summary
    assert "train: 65 clips, 5 speakers, 10 _silence_" in summary
    assert "test: 39 clips, 3 speakers, 6 _silence_" in summary
    assert "speakers disjoint: 30% of speakers test, 20% of speakers validation, seed 0" in summary


def test_split_is_seeded(classes: Path) -> None:
    def split(seed: int) -> tuple[dict[str, list[str]], list[set[str]]]:
        dm = SpeechCommandsDataModule(root=classes, val_fraction=0.2, test_fraction=0.2, seed=seed)
        dm.setup()
        return dm.split_speakers, [_silence_of(s) for s in (dm.train_set, dm.val_set, dm.test_set)]

    first = split(0)
    assert split(0) == first
    others = [split(seed) for seed in (1, 2, 3)]
    assert all(o[0] != first[0] for o in others) and all(o[1] != first[1] for o in others)


def test_test_speakers_from_a_list_or_a_file(classes: Path, tmp_path: Path) -> None:
    listed = SpeechCommandsDataModule(root=classes, test_speakers=["spk03", "spk07"], val_speakers=["spk01"])
    listed.setup()
    assert listed.split_speakers["test"] == ["spk03", "spk07"] and listed.split_speakers["val"] == ["spk01"]
    assert len(listed.split_speakers["train"]) == 7
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("# unseen voices\nspk03\n\n  spk07  # the second\n")
    (tmp_path / "val.txt").write_text("spk01\n")
    from_file = SpeechCommandsDataModule(root=classes, test_speakers=str(held_out), val_speakers=tmp_path / "val.txt")
    from_file.setup()
    assert from_file.split_speakers == listed.split_speakers
    assert from_file.test_set.paths == listed.test_set.paths and from_file.train_set.paths == listed.train_set.paths
    assert "test speakers spk03, spk07" in from_file.summary()
    # with named test speakers the draw of validation speakers is still seeded
    drawn = SpeechCommandsDataModule(root=classes, test_speakers=["spk03"], val_fraction=0.2)
    drawn.setup()
    assert drawn.split_speakers["test"] == ["spk03"] and len(drawn.split_speakers["val"]) == 2


def test_unknown_speakers_are_named(classes: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"test_speakers \['nobody'\] have no clips; the 10 speakers found include"):
        SpeechCommandsDataModule(root=classes, test_speakers=["spk01", "nobody"]).setup()
    (tmp_path / "ids.txt").write_text("ghost\n")
    with pytest.raises(ValueError, match=r"val_speakers \['ghost'\] have no clips"):
        SpeechCommandsDataModule(root=classes, val_speakers=str(tmp_path / "ids.txt")).setup()
    with pytest.raises(FileNotFoundError, match="test_speakers: no file .*absent.txt; pass a list of speaker ids"):
        SpeechCommandsDataModule(root=classes, test_speakers=str(tmp_path / "absent.txt")).setup()
    (tmp_path / "empty.txt").write_text("# nobody yet\n\n")
    with pytest.raises(ValueError, match="test_speakers: no speaker ids in"):
        SpeechCommandsDataModule(root=classes, test_speakers=str(tmp_path / "empty.txt")).setup()
    with pytest.raises(ValueError, match=r"\['spk01'\] are in both test_speakers and val_speakers"):
        SpeechCommandsDataModule(root=classes, test_speakers=["spk01"], val_speakers=["spk01"])
    with pytest.raises(ValueError, match="no speaker is left to train on"):
        SpeechCommandsDataModule(root=classes, test_speakers=list(SPEAKERS[:9]), val_fraction=0.1).setup()


def test_test_root_is_the_whole_test_set(tmp_path: Path, classes: Path) -> None:
    other = _write_classes(tmp_path / "other", speakers=("new01", "new02", "new03"), silence=range(100, 105))
    dm = SpeechCommandsDataModule(root=classes, test_root=other, val_fraction=0.2, test_fraction=0.3)
    dm.setup()
    assert dm.split_speakers["test"] == ["new01", "new02", "new03"]
    assert len(dm.test_set) == 3 * 11 + 5 and all(Path(p).is_relative_to(other) for p in dm.test_set.paths)
    assert _silence_of(dm.test_set) == {f"{n}.wav" for n in range(100, 105)}
    # every clip of root is train or validation: 20% of its speakers and of its silence clips validate
    assert len(dm.split_speakers["val"]) == 2 and len(dm.split_speakers["train"]) == 8
    assert len(dm.train_set) + len(dm.val_set) == 10 * 11 + SILENCE_CLIPS and len(_silence_of(dm.val_set)) == 4
    assert dm.speakers == sorted([*SPEAKERS, "new01", "new02", "new03"])
    assert f"every clip of {other} is the test set" in dm.summary()


def test_test_root_sharing_speakers_is_refused(tmp_path: Path, classes: Path) -> None:
    other = _write_classes(tmp_path / "other", speakers=("new01", "spk04", "spk08"), silence=range(2))
    with pytest.raises(ValueError, match=r"shares 2 speakers with root .*\(spk04, spk08\)"):
        SpeechCommandsDataModule(root=classes, test_root=other).setup()
    with pytest.raises(ValueError, match="test_root or test_speakers, not both"):
        SpeechCommandsDataModule(root=classes, test_root=other, test_speakers=["spk01"])
    with pytest.raises(FileNotFoundError, match="not a folder of class folders"):
        SpeechCommandsDataModule(root=classes, test_root=tmp_path).setup()


def test_noise_augment_uses_training_noise_only(classes: Path) -> None:
    from attnmm.data import BackgroundNoise

    noise = BackgroundNoise(min_snr_db=10.0, max_snr_db=10.0, p=1.0)
    dm = SpeechCommandsDataModule(root=classes, batch_size=8, noise_augment=noise, seed=3)
    with pytest.raises(RuntimeError, match=r"setup\('fit'\)"):
        dm.train_noise()
    dm.setup()
    train_silence = [p for p in dm.train_set.paths if Path(p).parent.name == "_silence_"]
    assert len(train_silence) == 16 and len(noise.noise) == 16
    assert all(torch.equal(a, b) for a, b in zip(noise.noise, dm.train_noise()))
    # the bank is exactly the training split's silence clips, none of validation or test
    bank = {tuple(np.round(c.numpy(), 4)) for c in noise.noise}
    decoded = {name: tuple(np.round(soundfile.read(classes / "_silence_" / name, dtype="float32")[0], 4))
               for name in (f"{n}.wav" for n in range(SILENCE_CLIPS))}
    held_out = _silence_of(dm.val_set) | _silence_of(dm.test_set)
    assert bank == {decoded[Path(p).name] for p in train_silence}
    assert not bank & {decoded[name] for name in held_out} and len(held_out) == 4
    # training batches get noise on their real samples; padding and lengths are unchanged
    items = [dm.train_set[i] for i in range(0, len(dm.train_set), 9)]
    clean, noisy = collate_audio(items), dm.train_dataloader().collate_fn(items)
    assert torch.equal(noisy["lengths"], clean["lengths"]) and torch.equal(noisy["label"], clean["label"])
    real = torch.arange(clean["waveform"].size(1)) < clean["lengths"][:, None]
    assert (noisy["waveform"] != clean["waveform"])[real].float().mean() > 0.99
    assert not noisy["waveform"][~real].any()
    # validation and test batches are never augmented
    assert dm.val_dataloader().collate_fn is collate_audio and dm.test_dataloader().collate_fn is collate_audio
    assert "noise augmentation on training batches, from the 16 training noise clips" in dm.summary()


def test_noise_augment_must_take_noise(classes: Path, tmp_path: Path) -> None:
    from attnmm.data import AddNoise, BackgroundNoise, ChainAugment, SpeedPerturb

    with pytest.raises(ValueError, match="no module that takes noise clips"):
        SpeechCommandsDataModule(root=classes, noise_augment=AddNoise())
    chain = ChainAugment([SpeedPerturb([1.0]), BackgroundNoise(p=1.0)])
    dm = SpeechCommandsDataModule(root=classes, noise_augment=chain)
    dm.setup("fit")
    assert len(chain.steps[1].noise) == len(_silence_of(dm.train_set)) == 16
    quiet = _write_classes(tmp_path / "quiet", speakers=SPEAKERS[:3], silence=range(0))
    with pytest.raises(ValueError, match="include_silence=True but .* has no _silence_/ clips"):
        SpeechCommandsDataModule(root=quiet).setup()
    with pytest.raises(ValueError, match="noise_augment needs noise clips"):
        SpeechCommandsDataModule(root=quiet, include_silence=False, noise_augment=BackgroundNoise()).setup()


def test_a_file_name_without_speaker_is_named(tmp_path: Path) -> None:
    folder = _write_classes(tmp_path / "c", speakers=SPEAKERS[:2], silence=range(2))
    soundfile.write(folder / "yes" / "recorded.wav", np.zeros(10), 16000)
    with pytest.raises(ValueError, match=r"recorded.wav: clips in yes/ are named <speaker>_nohash_<n>.wav"):
        SpeechCommandsDataModule(root=folder).setup()


@pytest.mark.parametrize(
    "kwargs", [{"val_fraction": 0.5, "test_fraction": 0.5}, {"test_fraction": -0.1}, {"layout": "flat"},
               {"labels": ["_silence_"]}]
)
def test_bad_split_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SpeechCommandsDataModule(**kwargs)


# ------------------------------------------------------------------ the full layout: the 12-class task


def _write_full(base: Path, seconds: int = 10) -> Path:
    """The full layout (official lists) with a _background_noise_ recording of ``seconds`` seconds + a bit."""
    version_dir = _write_dataset(base)
    noise = (0.1 * np.random.default_rng(7).standard_normal(16000 * seconds + 500)).astype(np.float32)
    soundfile.write(version_dir / "_background_noise_" / "running_tap.wav", noise, 16000, subtype="PCM_16")
    return version_dir


def test_full_layout_twelve_classes(tmp_path: Path) -> None:
    from attnmm.data import BackgroundNoise

    version_dir = _write_full(tmp_path)
    noise = BackgroundNoise(p=1.0)
    dm = SpeechCommandsDataModule(
        root=tmp_path, include_unknown=True, include_silence=True, val_fraction=0.2, test_fraction=0.1,
        noise_augment=noise,
    )
    assert dm.dataset_layout == "full" and dm.class_names == TWELVE
    dm.setup()
    # the official lists: speaker k's clips are in split k; 'bed' is _unknown_
    assert dm.split_speakers == {"train": ["spk0"], "val": ["spk1"], "test": ["spk2"]}
    # 1 s slices of the background recordings (white_noise.wav: 1, running_tap.wav: 10), split 20% / 10%
    slices = {name: [s for p, s in zip(d.paths, d.spans) if Path(p).parent.name == "_background_noise_"]
              for name, d in (("train", dm.train_set), ("val", dm.val_set), ("test", dm.test_set))}
    assert [len(v) for v in slices.values()] == [8, 2, 1]
    assert all(stop - start == 16000 for spans in slices.values() for start, stop in spans)
    assert {dm.class_names[y] for y in dm.test_set.labels} == set(TWELVE) - {"_silence_"} | (
        {"_silence_"} if slices["test"] else set())
    assert len(dm.train_set) == 11 + 8 and len(noise.noise) == 8
    # the noise bank is the training slices: the same samples, none of a validation or test slice
    whole = {p.name: soundfile.read(p, dtype="float32")[0] for p in (version_dir / "_background_noise_").glob("*.wav")}
    train_pieces = [(Path(p).name, s) for p, s in zip(dm.train_set.paths, dm.train_set.spans) if s is not None]
    for clip, (name, (start, stop)) in zip(noise.noise, train_pieces):
        assert np.allclose(clip.numpy(), whole[name][start:stop])
    held_out = {(Path(p).name, s) for d in (dm.val_set, dm.test_set) for p, s in zip(d.paths, d.spans) if s}
    assert not held_out & set(train_pieces)
    assert "the official lists (speakers disjoint)" in dm.summary()


def test_full_layout_refuses_speaker_options(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="test_speakers apply to the 'classes' layout"):
        SpeechCommandsDataModule(root=root, test_speakers=["spk2"]).setup()
    with pytest.raises(ValueError, match="test_root apply to the 'classes' layout"):
        SpeechCommandsDataModule(root=root, test_root=tmp_path).setup()
    import shutil

    shutil.rmtree(_write_dataset(tmp_path) / "_background_noise_")
    with pytest.raises(ValueError, match="include_silence=True but .* has no _background_noise_/ clips"):
        SpeechCommandsDataModule(root=tmp_path, include_silence=True).setup()


def test_options_from_a_config(classes: Path, tmp_path: Path) -> None:
    from jsonargparse import ArgumentParser

    from attnmm.data import BackgroundNoise

    parser = ArgumentParser()
    parser.add_class_arguments(SpeechCommandsDataModule, "data")
    (tmp_path / "test.txt").write_text("spk05\n")
    noise = {"class_path": "attnmm.data.BackgroundNoise", "init_args": {"min_snr_db": 0.0, "p": 0.5}}
    config = {"data": {"root": str(classes), "test_speakers": str(tmp_path / "test.txt"), "noise_augment": noise}}
    dm = parser.instantiate(parser.parse_object(config)).data
    assert isinstance(dm.noise_augment, BackgroundNoise) and dm.noise_augment.p == 0.5
    dm.setup()
    assert dm.split_speakers["test"] == ["spk05"]
    listed = parser.parse_args([f"--data.root={classes}", "--data.test_speakers=[spk01, spk02]"])
    assert listed.data.test_speakers == ["spk01", "spk02"]


@pytest.mark.data
def test_real_speech_commands_test_set() -> None:
    import os

    data = os.environ.get("ATTNMM_DATA")
    if not data:
        pytest.skip("ATTNMM_DATA is unset; set it to a folder holding speech_commands_test_v0.02/ to run this test")
    folder = Path(data) / "speech_commands_test_v0.02"
    if not folder.is_dir():
        pytest.skip(f"no Speech Commands test set under $ATTNMM_DATA ({folder} is missing)")
    dm = SpeechCommandsDataModule(seed=0)
    assert dm.dataset_layout == "classes" and dm.dataset_dir == folder and dm.class_names == TWELVE
    dm.setup()
    sets = {"train": dm.train_set, "val": dm.val_set, "test": dm.test_set}
    assert len(dm.speakers) == 197
    silence = {k: len(_silence_of(s)) for k, s in sets.items()}
    assert sum(silence.values()) == 329 and sum(len(s) for s in sets.values()) - 329 == 3533
    speakers = {k: _speakers_of(s) for k, s in sets.items()}
    assert not (speakers["train"] & speakers["val"] or speakers["train"] & speakers["test"]
                or speakers["val"] & speakers["test"])
    assert [len(v) for v in speakers.values()] == [157, 20, 20] and list(silence.values()) == [263, 33, 33]
    assert "(157 speakers)" in repr(dm) and "train: " in dm.summary()
    batch = next(iter(dm.val_dataloader()))
    assert batch["waveform"].shape[1] == 16000 and float(batch["waveform"].abs().max()) <= 1.0


def test_sample_rate_resamples_clips_and_noise(classes: Path) -> None:
    """sample_rate=8000 reads the 16 kHz files and resamples every clip (and the noise bank) to 8 kHz."""
    import torchaudio

    from attnmm.data import BackgroundNoise

    with pytest.raises(ValueError, match="sample_rate is a rate in Hz"):
        SpeechCommandsDataModule(root=classes, sample_rate=0)
    native = SpeechCommandsDataModule(root=classes, seed=1)
    noise = BackgroundNoise(p=1.0)
    dm = SpeechCommandsDataModule(root=classes, seed=1, sample_rate=8000, noise_augment=noise)
    native.setup()
    dm.setup()
    assert dm.sample_rate == 8000 and native.sample_rate == 16000
    assert dm.split_speakers == native.split_speakers  # the same split
    for i in (0, 7, len(dm.train_set) - 1):  # a word clip, another, a _silence_ clip
        clip, label = dm.train_set[i]
        original, same_label = native.train_set[i]
        assert label == same_label
        torch.testing.assert_close(clip, torchaudio.functional.resample(original, 16000, 8000))
        assert clip.numel() == (original.numel() + 1) // 2
    assert len(noise.noise) == len(native.train_noise())
    assert all(a.numel() == (b.numel() + 1) // 2 for a, b in zip(noise.noise, native.train_noise()))
    assert repr(dm.test_set).endswith("sample_rate=8000, file_rate=16000)")
    assert "8000 Hz mono (resampled from 16000 Hz)" in dm.summary()
