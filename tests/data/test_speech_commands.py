from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import soundfile
import torch

import attnmm.data.speech_commands as sc_module
from attnmm.data import AudioBatch, SpeechCommandsDataModule
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
    assert repr(dm) == f"SpeechCommandsDataModule(root='{base}', classes=10, batch_size=64)"
    dm.setup("test")
    assert repr(dm) == f"SpeechCommandsDataModule(root='{base}', classes=10, batch_size=64, test=10)"


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
