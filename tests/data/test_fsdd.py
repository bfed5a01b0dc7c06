from __future__ import annotations

import io
import os
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

import attnmm.data.fsdd as fsdd_module
from attnmm.data import AudioBatch, FSDDDataModule, collate_audio, read_audio
from attnmm.data.fsdd import scan_fsdd, split_fsdd

SPEAKERS = ("ann", "bob", "cid")
TAKES = 8  # indices 0-7: 0-4 are the dataset's own test takes


def _length(digit: int, index: int) -> int:
    return 60 + 7 * digit + 3 * index


def _write_recordings(recordings: Path, speakers: tuple[str, ...] = SPEAKERS) -> None:
    recordings.mkdir(parents=True)
    for speaker in speakers:
        for digit in range(10):
            for index in range(TAKES):
                # a constant clip whose value encodes the digit, to check label/audio pairing after batching
                clip = np.full(_length(digit, index), 0.05 * (digit + 1), dtype=np.float32)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip, 8000, subtype="PCM_16")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    _write_recordings(root / "fsdd" / "recordings")
    return root


def _ids(dataset) -> set[str]:
    return {Path(p).name for p in dataset.paths}


def _parts(name: str) -> tuple[int, str, int]:
    digit, speaker, index = name.removesuffix(".wav").split("_")
    return int(digit), speaker, int(index)


def test_own_split(root: Path) -> None:
    dm = FSDDDataModule(root=root, download=False)
    dm.setup()
    train, val, test = _ids(dm.train_set), _ids(dm.val_set), _ids(dm.test_set)
    assert len(test) == len(SPEAKERS) * 10 * 5
    assert all(_parts(n)[2] < 5 for n in test)
    assert all(_parts(n)[2] >= 5 for n in train | val)
    assert not (train & val or train & test or val & test)
    assert len(train | val | test) == len(SPEAKERS) * 10 * TAKES
    assert len(val) == 10  # per digit: round(9 * 0.1) = 1
    assert dm.speakers == list(SPEAKERS)


def test_speaker_split_holds_speakers_out(root: Path) -> None:
    dm = FSDDDataModule(root=root, test_speakers=["bob"], val_fraction=0.25, download=False)
    dm.setup()
    train, val, test = _ids(dm.train_set), _ids(dm.val_set), _ids(dm.test_set)
    assert len(test) == 10 * TAKES and {_parts(n)[1] for n in test} == {"bob"}
    assert {_parts(n)[1] for n in train | val} == {"ann", "cid"}
    assert len(train) + len(val) == 2 * 10 * TAKES
    assert len(val) == 10 * 4  # per digit: 16 * 0.25


def test_validation_speakers_are_never_trained_on(root: Path) -> None:
    dm = FSDDDataModule(root=root, test_speakers=["bob"], val_speakers=["cid"], download=False)
    dm.setup()
    train, val, test = _ids(dm.train_set), _ids(dm.val_set), _ids(dm.test_set)
    assert {_parts(n)[1] for n in train} == {"ann"} and len(train) == 10 * TAKES
    assert {_parts(n)[1] for n in val} == {"cid"} and len(val) == 10 * TAKES
    assert {_parts(n)[1] for n in test} == {"bob"} and len(test) == 10 * TAKES
    assert "val_speakers=['cid']" in repr(dm) and "all takes of cid are the validation set" in dm.summary()


def test_validation_speakers_with_the_own_split(root: Path) -> None:
    # the own split's test takes 0-4 of every speaker stay the test set; cid's other takes validate
    train, val, test = split_fsdd(scan_fsdd(root / "fsdd" / "recordings"), val_speakers=["cid"])
    assert {(t.speaker, t.index >= 5) for t in val} == {("cid", True)} and len(val) == 10 * (TAKES - 5)
    assert {t.speaker for t in train} == {"ann", "bob"} and all(t.index >= 5 for t in train)
    assert len(test) == len(SPEAKERS) * 10 * 5


def test_validation_speakers_errors(root: Path) -> None:
    with pytest.raises(ValueError, match=r"\['bob'\] are in both test_speakers and val_speakers"):
        FSDDDataModule(root=root, test_speakers=["bob"], val_speakers=["bob", "cid"], download=False)
    takes = scan_fsdd(root / "fsdd" / "recordings")
    with pytest.raises(ValueError, match=r"\['bob'\] are in both"):
        split_fsdd(takes, test_speakers=["bob"], val_speakers=["bob"])
    with pytest.raises(ValueError, match=r"val_speakers \['zed'\] have no recordings"):
        split_fsdd(takes, val_speakers=["zed"])
    with pytest.raises(ValueError, match=r"leave no speaker to train on.*\['ann', 'cid'\]"):
        split_fsdd(takes, test_speakers=["bob"], val_speakers=["ann", "cid"])
    with pytest.raises(ValueError, match="val_speakers is empty"):
        FSDDDataModule(val_speakers=[])


def test_held_out_speakers_from_a_file(root: Path, tmp_path: Path) -> None:
    (tmp_path / "test.txt").write_text("# held out for testing\nbob\n\n")
    (tmp_path / "val.txt").write_text("cid  # validation voice\n")
    dm = FSDDDataModule(root=root, test_speakers=str(tmp_path / "test.txt"), val_speakers=tmp_path / "val.txt",
                        download=False)
    assert repr(dm).startswith(f"FSDDDataModule(root='{(root / 'fsdd').as_posix()}', split=test_speakers='")
    dm.setup()
    listed = FSDDDataModule(root=root, test_speakers=["bob"], val_speakers=["cid"], download=False)
    listed.setup()
    for split in ("train_set", "val_set", "test_set"):
        assert getattr(dm, split).paths == getattr(listed, split).paths
    assert {_parts(n)[1] for n in _ids(dm.test_set)} == {"bob"} and dm.test_set.num_speakers == 1
    summary = dm.summary()
    assert f"all takes of bob (from {tmp_path / 'test.txt'}) are the test set" in summary
    assert "all takes of cid (from" in summary
    assert "all takes of bob are the test set" in listed.summary()


def test_speaker_file_errors(root: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="test_speakers: no file .*absent.txt; pass a list of speaker ids"):
        FSDDDataModule(root=root, test_speakers=str(tmp_path / "absent.txt"), download=False).setup()
    (tmp_path / "none.txt").write_text("# to do\n")
    with pytest.raises(ValueError, match="val_speakers: no speaker ids in"):
        FSDDDataModule(root=root, val_speakers=str(tmp_path / "none.txt"), download=False).setup()
    (tmp_path / "zed.txt").write_text("zed\n")
    with pytest.raises(ValueError, match=r"test_speakers \['zed'\] have no recordings"):
        FSDDDataModule(root=root, test_speakers=str(tmp_path / "zed.txt"), download=False).setup()
    (tmp_path / "bob.txt").write_text("bob\n")
    with pytest.raises(ValueError, match=r"\['bob'\] are in both test_speakers and val_speakers"):
        FSDDDataModule(root=root, test_speakers=["bob"], val_speakers=str(tmp_path / "bob.txt"), download=False).setup()


def test_validation_is_deterministic_and_stratified(root: Path) -> None:
    def val_of(seed: int) -> set[str]:
        dm = FSDDDataModule(root=root, test_speakers=["cid"], val_fraction=0.2, seed=seed, download=False)
        dm.setup("fit")
        assert dm.test_set is None  # only what the stage needs is loaded
        return _ids(dm.val_set)

    first = val_of(0)
    assert val_of(0) == first
    assert val_of(1) != first
    per_digit = [sum(_parts(n)[0] == d for n in first) for d in range(10)]
    assert per_digit == [3] * 10  # round(16 * 0.2)


def test_no_validation(root: Path) -> None:
    dm = FSDDDataModule(root=root, val_fraction=0.0, download=False)
    dm.setup("fit")
    assert len(dm.val_set) == 0 and len(dm.train_set) == len(SPEAKERS) * 10 * 3


def test_batches(root: Path) -> None:
    dm = FSDDDataModule(root=root, batch_size=16, download=False)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, dict) and set(batch) == set(AudioBatch.__annotations__)
    assert len(batch["label"]) == 16
    assert batch["waveform"].dtype == torch.float32 and batch["lengths"].dtype == torch.long
    assert batch["label"].dtype == torch.long
    assert batch["waveform"].shape == (16, int(batch["lengths"].max()))
    for b in range(16):
        n, y = int(batch["lengths"][b]), int(batch["label"][b])
        assert torch.allclose(batch["waveform"][b, :n], torch.full((n,), 0.05 * (y + 1)), atol=1e-4)
        assert torch.all(batch["waveform"][b, n:] == 0)
    test_labels = torch.cat([b["label"] for b in dm.test_dataloader()])
    assert test_labels.tolist() == sorted(test_labels.tolist())  # test order is fixed
    assert dm.sample_rate == 8000 and dm.num_classes == 10 and dm.class_names[3] == "three"


def test_collate_audio_pads_and_counts() -> None:
    batch = collate_audio([(torch.ones(2), 4), (torch.arange(1.0, 6.0), 0), (torch.zeros(0), 9)])
    assert batch["waveform"].shape == (3, 5)
    assert batch["lengths"].tolist() == [2, 5, 0]
    assert batch["label"].tolist() == [4, 0, 9]
    assert batch["waveform"][0].tolist() == [1, 1, 0, 0, 0]
    assert batch["waveform"][1].tolist() == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match=r"shape \(1, 3\)"):
        collate_audio([(torch.ones(1, 3), 0)])
    with pytest.raises(ValueError, match="empty"):
        collate_audio([])


def test_corrupt_file_is_named(tmp_path: Path) -> None:
    recordings = tmp_path / "fsdd" / "recordings"
    _write_recordings(recordings, speakers=("ann",))
    (recordings / "3_ann_6.wav").write_bytes(b"RIFF not really a wave file")
    dm = FSDDDataModule(root=tmp_path, download=False)
    with pytest.raises(RuntimeError, match="3_ann_6.wav"):
        dm.setup()


def test_truncated_file_is_named(tmp_path: Path) -> None:
    # a WAV cut short still decodes (libsndfile reads what is there); its header gives it away
    recordings = tmp_path / "fsdd" / "recordings"
    _write_recordings(recordings, speakers=("ann",))
    path = recordings / "7_ann_2.wav"
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])
    declared = r"7_ann_2.wav is truncated: its WAV header declares \d+ bytes of samples but only"
    with pytest.raises(RuntimeError, match=declared):
        FSDDDataModule(root=tmp_path, download=False).setup()
    with pytest.raises(RuntimeError, match="replace it with an intact copy"):
        read_audio(path)
    path.write_bytes(whole)
    assert read_audio(path).shape == (_length(7, 2),)


def test_misnamed_file_is_named(tmp_path: Path) -> None:
    recordings = tmp_path / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    soundfile.write(recordings / "three_ann.wav", np.zeros(10), 8000)
    with pytest.raises(ValueError, match="three_ann.wav"):
        FSDDDataModule(root=tmp_path, download=False).setup()


def test_read_audio_checks_rate_and_mixes_channels(tmp_path: Path) -> None:
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([np.full(4, 0.5), np.zeros(4)], axis=1), 16000, subtype="PCM_16")
    assert np.allclose(read_audio(path), 0.25, atol=1e-4)
    with pytest.raises(ValueError, match="16000 Hz, expected 8000 Hz"):
        read_audio(path, sample_rate=8000)
    with pytest.raises(RuntimeError, match="absent.wav"):
        read_audio(tmp_path / "absent.wav")


def test_unknown_or_all_test_speakers(root: Path) -> None:
    with pytest.raises(ValueError, match=r"\['zed'\] have no recordings.*\['ann', 'bob', 'cid'\]"):
        FSDDDataModule(root=root, test_speakers=["zed"], download=False).setup()
    with pytest.raises(ValueError, match="leave at least one"):
        FSDDDataModule(root=root, test_speakers=list(SPEAKERS), download=False).setup()


@pytest.mark.parametrize("kwargs", [{"val_fraction": 1.0}, {"batch_size": 0}, {"test_speakers": []}])
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FSDDDataModule(**kwargs)


def test_missing_data_says_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(dataset_dir: Path) -> Path:
        raise OSError("Name or service not known")

    monkeypatch.setattr(fsdd_module, "download_fsdd", offline)
    dm = FSDDDataModule(root=tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert f"{tmp_path / 'fsdd' / 'recordings'}/*.wav" in message
    assert "ATTNMM_DATA" in message and "Name or service not known" in message
    with pytest.raises(FileNotFoundError, match="ATTNMM_DATA"):
        dm.setup()


def test_no_download_when_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(dataset_dir: Path) -> Path:
        raise AssertionError("download attempted with download=False")

    monkeypatch.setattr(fsdd_module, "download_fsdd", forbidden)
    with pytest.raises(FileNotFoundError, match="download=False"):
        FSDDDataModule(root=tmp_path, download=False).prepare_data()


def test_download_extracts_recordings_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "release" / "free-spoken-digit-dataset-1.0.10" / "recordings"
    _write_recordings(source, speakers=("ann",))
    archive = tmp_path / "release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source.parent, arcname=source.parent.name)
        evil = tarfile.TarInfo("../recordings/0_evil_0.wav")
        tar.addfile(evil, io.BytesIO(b""))
    calls = []

    def fake_urlopen(url: str, timeout: float) -> io.BufferedReader:
        calls.append(url)
        return open(archive, "rb")

    monkeypatch.setattr(fsdd_module.urllib.request, "urlopen", fake_urlopen)
    dm = FSDDDataModule(root=tmp_path / "data")
    dm.prepare_data()
    recordings = tmp_path / "data" / "fsdd" / "recordings"
    assert calls == [fsdd_module.FSDD_URL]
    assert sorted(os.listdir(recordings)) == sorted(os.listdir(source))
    assert os.listdir(recordings.parent) == ["recordings"]  # no archive or staging left behind
    assert not (tmp_path / "data" / "recordings").exists()
    dm.setup()
    dm.prepare_data()
    assert len(calls) == 1  # present data is not fetched again


def test_interrupted_download_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "release" / "free-spoken-digit-dataset-1.0.10" / "recordings"
    _write_recordings(source, speakers=("ann",))
    archive = tmp_path / "release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source.parent, arcname=source.parent.name)
    cut = archive.read_bytes()[: archive.stat().st_size // 2]  # the connection dropped halfway

    monkeypatch.setattr(fsdd_module.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(cut))
    with pytest.raises(FileNotFoundError, match=r"downloading .* failed"):
        FSDDDataModule(root=tmp_path / "data").prepare_data()
    assert not (tmp_path / "data" / "fsdd").exists()  # no recordings/, no staging folder, no empty folder


def test_repr_and_summary(root: Path) -> None:
    dm = FSDDDataModule(root=root, download=False)
    assert repr(dm) == f"FSDDDataModule(root='{(root / 'fsdd').as_posix()}', split=own, batch_size=32)"
    with pytest.raises(RuntimeError, match="setup"):
        _ = dm.speakers
    with pytest.raises(RuntimeError, match=r"setup\('fit'\)"):
        dm.train_dataloader()
    dm.setup("test")
    assert repr(dm).endswith("batch_size=32, train=80, val=10, test=150)")
    summary = dm.summary()
    assert str(dm) == summary
    assert "240 recordings, speakers: ann, bob, cid" in summary and "train 80, val 10, test 150" in summary


@pytest.mark.data
def test_real_fsdd() -> None:
    data = os.environ.get("ATTNMM_DATA")
    if not data:
        pytest.skip("ATTNMM_DATA is unset; set it to a folder holding fsdd/recordings/*.wav to run this test")
    if not (Path(data) / "fsdd" / "recordings").is_dir():
        pytest.skip(f"no FSDD under $ATTNMM_DATA ({data}/fsdd/recordings is missing)")
    dm = FSDDDataModule(download=False, batch_size=64)
    dm.setup()
    assert len(dm.speakers) == 5 and "theo" in dm.speakers
    assert len(dm.test_set) == 250
    assert len(dm.train_set) + len(dm.val_set) == 2250
    batch = next(iter(dm.val_dataloader()))
    assert batch["waveform"].shape[0] == 64 and float(batch["waveform"].abs().max()) <= 1.0
    held_out = FSDDDataModule(download=False, test_speakers=["theo"])
    held_out.setup()
    assert len(held_out.test_set) == 500 and len(held_out.train_set) + len(held_out.val_set) == 2000
    assert not any("_theo_" in Path(p).name for p in held_out.train_set.paths + held_out.val_set.paths)


@pytest.mark.parametrize("full", [False, True])
def test_extra_voices_join_training_only(root: Path, tmp_path: Path, full: bool) -> None:
    from _voices import write_voices

    write_voices(tmp_path / "sc", full=full)  # 6 speakers say three and seven (and marvin, not a digit)
    dm = FSDDDataModule(root=root, download=False, test_speakers=["cid"], extra_voices=tmp_path / "sc",
                        extra_voices_repeats=3)
    dm.setup("fit")
    voices = dm.voices_set
    assert voices is not None and len(voices) == 12 and voices.num_speakers == 6
    assert sorted(set(voices.labels)) == [3, 7] and voices.sample_rate == 8000
    assert {len(voices[i][0]) for i in range(12)} == {800, 880}  # 1,600 and 1,760 samples at 16 kHz, at 8 kHz
    batches = list(dm.train_dataloader())
    assert sum(len(b["label"]) for b in batches) == len(dm.train_set) + 3 * 12
    assert _ids(dm.val_set).isdisjoint(_ids(voices)) and len(dm.val_set) < len(dm.train_set)
    assert "the digits of" in dm.summary() and "12 clips of 6 speakers, 3x per epoch" in dm.summary()
    dm.setup("test")
    assert {_parts(n)[1] for n in _ids(dm.test_set)} == {"cid"}  # the test set stays FSDD's held-out speaker
    # a relative folder that does not exist here is taken under the data folder
    rel = FSDDDataModule(root=tmp_path, download=False, extra_voices="sc")
    assert rel._voices_dir() == tmp_path / "sc"
    plain = FSDDDataModule(root=root, download=False)
    plain.setup("fit")
    assert plain.voices_set is None and "extra training voices" not in plain.summary()


def test_extra_voices_refuse_bad_options(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra_voices_repeats is a whole number >= 1"):
        FSDDDataModule(root=root, extra_voices="sc", extra_voices_repeats=0)
    dm = FSDDDataModule(root=root, download=False, extra_voices=tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no Speech Commands folder"):
        dm.setup("fit")
    lenient = FSDDDataModule(root=root, download=False, extra_voices=tmp_path / "absent", require_extra_voices=False)
    with pytest.warns(UserWarning, match="training on FSDD's voices alone"):
        lenient.setup("fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lenient.setup("fit")  # looked for once: no second warning
    assert lenient.voices_set is None and "(not found: FSDD's voices alone)" in lenient.summary()
    assert sum(len(b["label"]) for b in lenient.train_dataloader()) == len(lenient.train_set)
