"""Audio-visual digits: pairing (same digit, deterministic, disjoint splits, the fixed test sets),
seeded corruptions, missing modalities, test_speakers, errors; one test on the real data."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from _voices import write_voices

from attnmm.adapters import ImageAdapter, SpeechAdapter
from attnmm.data import AVDigitsDataModule, MNISTDataModule
from attnmm.data.avdigits import AVDigits, pair_images

SPEAKERS = ("ann", "bob", "cid")
TAKES = 8  # indices 0-7: 0-4 are the dataset's own test takes
TRAIN, T10K = 1, 2  # the marker pixel of the two MNIST files


def _write_recordings(recordings: Path) -> None:
    recordings.mkdir(parents=True)
    for speaker in SPEAKERS:
        for digit in range(10):
            for index in range(TAKES):
                # a constant clip whose value encodes the digit, to check the pairs after batching
                clip = np.full(60 + 7 * digit + 3 * index, 0.05 * (digit + 1), dtype=np.float32)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip, 8000, subtype="PCM_16")


def _write_idx(path: Path, values: np.ndarray) -> None:
    magic = 2051 if values.ndim == 3 else 2049
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in values.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + values.astype(np.uint8).tobytes())


def _write_mnist(raw: Path, part: str, n: int) -> None:
    """Images whose first pixels say which file and which image they are, and their digit; no pixel is 0."""
    raw.mkdir(parents=True, exist_ok=True)
    labels = np.arange(n) % 10
    images = np.full((n, 28, 28), 200, dtype=np.uint8)
    images[:, 0, 0] = TRAIN if part == "train" else T10K
    images[:, 0, 1] = np.arange(n) // 200 + 1
    images[:, 0, 2] = np.arange(n) % 200 + 1
    images[:, 0, 3] = labels * 20 + 10
    _write_idx(raw / f"{part}-images-idx3-ubyte.gz", images)
    _write_idx(raw / f"{part}-labels-idx1-ubyte.gz", labels)


def _image_id(image: torch.Tensor) -> tuple[int, int]:
    """(file marker, index) of an image, uint8 (1, 28, 28) or float in [0, 1]."""
    pixels = (image.float() * 255).round().long() if image.is_floating_point() else image.long()
    return int(pixels[0, 0, 0]), int(pixels[0, 0, 1] - 1) * 200 + int(pixels[0, 0, 2] - 1)


def _image_digit(image: torch.Tensor) -> int:
    pixels = (image.float() * 255).round().long() if image.is_floating_point() else image.long()
    return (int(pixels[0, 0, 3]) - 10) // 20


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    _write_recordings(root / "fsdd" / "recordings")
    _write_mnist(root / "MNIST" / "raw", "train", 300)  # MNISTDataModule: 200 train, 100 val
    _write_mnist(root / "MNIST" / "raw", "t10k", 200)  # ... and 200 test
    return root


def _dm(root: Path, **kwargs) -> AVDigitsDataModule:
    dm = AVDigitsDataModule(root=root, download=False, image_val_size=100, batch_size=16, **kwargs)
    dm.setup()
    return dm


def _recordings(ds: AVDigits) -> list[str]:
    return [Path(p).name for p in ds.clips.paths]


def _images(ds: AVDigits) -> list[tuple[int, int]]:
    return [_image_id(ds.images[j]) for j in ds.pairs]


def _take_index(name: str) -> int:
    return int(name.removesuffix(".wav").split("_")[2])


def test_pairs_have_one_digit_and_splits_share_nothing(root: Path) -> None:
    dm = _dm(root)
    sets = {"train": dm.train_set, "val": dm.val_set, "test": dm.test_set}
    recordings = {k: _recordings(ds) for k, ds in sets.items()}
    images = {k: _images(ds) for k, ds in sets.items()}
    for split, ds in sets.items():
        for i in range(len(ds)):
            assert _image_digit(ds.images[ds.pairs[i]]) == ds.clips.labels[i] == int(ds.clips.paths[i].name[0])
        assert len(set(images[split])) == len(ds)  # distinct images: every digit has enough of them
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not set(recordings[a]) & set(recordings[b]) and not set(images[a]) & set(images[b])
    # the test recordings are FSDD's own test takes, all of them; the test images are MNIST's test images
    assert sorted(recordings["test"]) == sorted(
        f"{d}_{s}_{i}.wav" for d in range(10) for s in SPEAKERS for i in range(5)
    )
    assert all(_take_index(n) >= 5 for n in recordings["train"] + recordings["val"])
    assert {part for part, _ in images["test"]} == {T10K}
    # training and validation images are MNISTDataModule's: its first 200 train, its last 100 validate
    assert {part for part, _ in images["train"] + images["val"]} == {TRAIN}
    assert max(i for _, i in images["train"]) < 200 <= min(i for _, i in images["val"])
    assert {k: len(ds) for k, ds in sets.items()} == {"train": 80, "val": 10, "test": 150}


def test_test_images_are_the_image_recipes_test_images(root: Path, tmp_path: Path) -> None:
    # the offline layout: only the 10k test file, whose last 2,000 images MNISTDataModule tests on
    (tmp_path / "fsdd").mkdir()
    os.symlink(root / "fsdd" / "recordings", tmp_path / "fsdd" / "recordings")
    _write_mnist(tmp_path / "MNIST" / "raw", "t10k", 8400)
    dm = AVDigitsDataModule(root=tmp_path, download=False)
    dm.setup()
    mnist = MNISTDataModule(root=tmp_path)
    mnist.setup()
    assert torch.equal(dm.test_set.images, mnist.datasets["test"].tensors[0])
    assert min(i for _, i in _images(dm.test_set)) >= 8000
    assert max(i for _, i in _images(dm.train_set) + _images(dm.val_set)) < 8000
    assert max(i for _, i in _images(dm.train_set)) < 7000 <= min(i for _, i in _images(dm.val_set))


def test_pairing_is_deterministic_given_the_seeds(root: Path) -> None:
    def pairs(**kwargs) -> dict[str, list]:
        dm = _dm(root, **kwargs)
        return {k: list(zip(_recordings(ds), _images(ds))) for k, ds in
                (("train", dm.train_set), ("val", dm.val_set), ("test", dm.test_set))}

    first, again, other_seed, other_test_seed = pairs(), pairs(), pairs(seed=1), pairs(test_seed=1)
    assert first == again
    assert other_seed["train"] != first["train"] and other_seed["test"] == first["test"]  # a fixed test set
    assert other_test_seed["test"] != first["test"] and other_test_seed["train"] == first["train"]


def test_batches_feed_both_adapters(root: Path) -> None:
    dm = _dm(root)
    batches = list(dm.test_dataloader())
    batch = batches[0]
    assert set(batch) == {"waveform", "lengths", "image", "audio_present", "image_present", "label"}
    B = batch["label"].shape[0]
    assert batch["waveform"].shape == (B, int(batch["lengths"].max())) and batch["lengths"].dtype == torch.long
    assert batch["image"].shape == (B, 1, 28, 28) and batch["image"].dtype == torch.float32
    assert batch["audio_present"].dtype == torch.bool and bool(batch["audio_present"].all())
    assert batch["image_present"].dtype == torch.bool and bool(batch["image_present"].all())
    for batch in batches:
        labels = batch["label"].tolist()
        expected = torch.tensor([0.05 * (y + 1) for y in labels])
        assert torch.allclose(batch["waveform"][:, 0], expected, atol=1e-4)  # the audio of the label's digit
        assert [_image_digit(im) for im in batch["image"]] == labels  # the image of the label's digit
        assert batch["lengths"].tolist() == [int((w != 0).sum()) for w in batch["waveform"]]
    assert SpeechAdapter(d_model=16)(batch).x.shape[0] == batch["label"].shape[0]
    assert ImageAdapter(d_model=16)(batch).x.shape == (batch["label"].shape[0], 49, 16)


def _snr_db(clean: torch.Tensor, noisy: torch.Tensor) -> float:
    return 10 * math.log10(float(clean.pow(2).sum()) / float((noisy - clean).pow(2).sum()))


def test_audio_noise_has_the_snr_and_is_seeded_per_example(root: Path) -> None:
    clean, noisy, again = _dm(root), _dm(root, audio_snr_db=5.0), _dm(root, audio_snr_db=5.0)
    for split in ("val", "test"):
        a, b, c = (getattr(dm, f"{split}_set") for dm in (clean, noisy, again))
        for i in range(0, len(a), 7):
            x, y = a[i]["waveform"], b[i]["waveform"]
            assert y.shape == x.shape and _snr_db(x, y) == pytest.approx(5.0, abs=1e-3)
            assert torch.equal(b[i]["waveform"], y) and torch.equal(c[i]["waveform"], y)  # every epoch, every run
            assert torch.equal(b[i]["image"], a[i]["image"])  # the image untouched
    val, test = noisy.val_set[0]["waveform"], noisy.test_set[0]["waveform"]
    assert not torch.equal(val[: len(test)], test[: len(val)])  # other draws in other splits
    # training draws afresh each time, from torch's global generator
    train = noisy.train_set
    torch.manual_seed(0)
    first = train[0]["waveform"]
    assert not torch.equal(train[0]["waveform"], first)
    torch.manual_seed(0)
    assert torch.equal(train[0]["waveform"], first)
    assert _snr_db(clean.train_set[0]["waveform"], first) == pytest.approx(5.0, abs=1e-3)


def _zero_square(image: torch.Tensor) -> tuple[int, int, int, int]:
    rows, cols = (image[0] == 0).nonzero(as_tuple=True)
    return int(rows.min()), int(cols.min()), int(rows.max()) + 1, int(cols.max()) + 1


def test_image_occlusion_and_noise_are_seeded_per_example(root: Path) -> None:
    clean, occluded = _dm(root), _dm(root, image_occlusion=6)
    both, again = _dm(root, image_occlusion=6, image_noise=0.05), _dm(root, image_occlusion=6, image_noise=0.05)
    corners = set()
    for i in range(len(clean.test_set)):
        image = occluded.test_set[i]["image"]
        top, left, bottom, right = _zero_square(image)
        assert (bottom - top, right - left) == (6, 6) and int((image == 0).sum()) == 36  # one 6 x 6 square
        outside = image != 0
        assert torch.equal(image[outside], clean.test_set[i]["image"][outside])
        corners.add((top, left))
        assert torch.equal(occluded.test_set[i]["image"], image)  # the same square at every access
        noisy = both.test_set[i]["image"]
        assert not bool(noisy[:, top:bottom, left:right].any())  # the noise does not move the square
        assert torch.equal(again.test_set[i]["image"], noisy)
        assert float(noisy.min()) >= 0.0 and float(noisy.max()) <= 1.0
    assert len(corners) > 20  # the position varies between examples
    noise_only = _dm(root, image_noise=0.05)
    diff = noise_only.val_set[0]["image"] - clean.val_set[0]["image"]
    assert float(diff[:, 1:].std()) == pytest.approx(0.05, rel=0.2)  # rows 1-27: pixels 200/255, never clipped
    assert torch.equal(noise_only.val_set[0]["waveform"], clean.val_set[0]["waveform"])  # the audio untouched


def test_corrupt_one_touches_one_modality_per_example(root: Path) -> None:
    clean = _dm(root)
    both = _dm(root, audio_snr_db=0.0, image_occlusion=6)
    one, again = (_dm(root, audio_snr_db=0.0, image_occlusion=6, corrupt="one") for _ in range(2))
    for split in ("val", "test"):
        a, b, c, d = (getattr(dm, f"{split}_set") for dm in (clean, both, one, again))
        touched = []
        for i in range(len(a)):
            audio = not torch.equal(c[i]["waveform"], a[i]["waveform"])
            image = not torch.equal(c[i]["image"], a[i]["image"])
            assert audio != image  # exactly one modality corrupted
            touched.append(audio)
            # the corrupted modality as under "both" (the same draws), the other clean
            key = "waveform" if audio else "image"
            assert torch.equal(c[i][key], b[i][key])
            assert torch.equal(d[i]["waveform"], c[i]["waveform"]) and torch.equal(d[i]["image"], c[i]["image"])
            assert c[i]["audio_present"] and c[i]["image_present"]
        assert 0.3 < sum(touched) / len(touched) < 0.7  # audio or image, about equally
    # training draws which modality afresh, from torch's global generator
    torch.manual_seed(0)
    first = [not torch.equal(one.train_set[i]["image"], clean.train_set[i]["image"]) for i in range(40)]
    torch.manual_seed(0)
    assert first == [not torch.equal(one.train_set[i]["image"], clean.train_set[i]["image"]) for i in range(40)]
    assert 5 < sum(first) < 35
    assert repr(one).endswith("corrupt='one', train=80, val=10, test=150)")
    assert "(one modality per pair, drawn per pair)" in one.summary()
    assert "drawn per pair" not in both.summary()


@pytest.mark.parametrize("modality", ["audio", "image"])
def test_drop_modality_removes_it_from_the_test_set_only(root: Path, modality: str) -> None:
    dm = _dm(root, drop_modality=modality)
    clean = _dm(root)
    batch = next(iter(dm.test_dataloader()))
    B = batch["label"].shape[0]
    assert batch["audio_present"].tolist() == [modality != "audio"] * B
    assert batch["image_present"].tolist() == [modality != "image"] * B
    reference = next(iter(clean.test_dataloader()))
    assert torch.equal(batch["label"], reference["label"])
    if modality == "audio":
        assert batch["waveform"].shape == (B, 0) and batch["lengths"].tolist() == [0] * B
        assert torch.equal(batch["image"], reference["image"])
        assert SpeechAdapter(d_model=16)(batch).lengths.tolist() == [0] * B  # no frames, a flagged empty item
    else:
        assert not bool(batch["image"].any()) and torch.equal(batch["waveform"], reference["waveform"])
        assert ImageAdapter(d_model=16)(batch).x.shape == (B, 49, 16)
    for split in ("train", "val"):
        ds = getattr(dm, f"{split}_set")
        assert all(ds[i]["audio_present"] and ds[i]["image_present"] for i in range(len(ds)))


def test_modality_dropout_removes_one_modality_of_training_examples(root: Path) -> None:
    always = _dm(root, modality_dropout=1.0)
    torch.manual_seed(0)
    items = [always.train_set[i] for i in range(len(always.train_set))]
    audio, image = ([bool(item[f"{m}_present"]) for item in items] for m in ("audio", "image"))
    assert all(a != b for a, b in zip(audio, image, strict=True))  # exactly one modality left, never none
    assert 20 < sum(audio) < 60  # both kinds of removal occur, about equally
    assert all(len(item["waveform"]) == 0 for item, a in zip(items, audio, strict=True) if not a)
    assert all(not bool(item["image"].any()) for item, b in zip(items, image, strict=True) if not b)
    half = _dm(root, modality_dropout=0.5)
    torch.manual_seed(0)
    kept = [bool(half.train_set[i]["audio_present"] and half.train_set[i]["image_present"]) for i in range(80)]
    assert 20 < sum(kept) < 60
    torch.manual_seed(0)
    assert kept == [bool(half.train_set[i]["audio_present"] and half.train_set[i]["image_present"]) for i in range(80)]
    for ds in (always.val_set, always.test_set):  # evaluation keeps both
        assert all(ds[i]["audio_present"] and ds[i]["image_present"] for i in range(len(ds)))


def test_test_speakers_hold_speakers_out(root: Path) -> None:
    dm = _dm(root, test_speakers=["bob"])
    test, rest = _recordings(dm.test_set), _recordings(dm.train_set) + _recordings(dm.val_set)
    assert len(test) == 10 * TAKES and {n.split("_")[1] for n in test} == {"bob"}
    assert {n.split("_")[1] for n in rest} == {"ann", "cid"} and len(rest) == 2 * 10 * TAKES
    assert {part for part, _ in _images(dm.test_set)} == {T10K}
    assert dm.speakers == list(SPEAKERS)
    assert "test_speakers=['bob']" in repr(dm)


def test_pair_images_reuses_images_only_when_short() -> None:
    image_labels = torch.tensor([5, 5, 2])
    pairs = pair_images([5, 5, 5, 2], image_labels, seed=3)
    assert [int(image_labels[j]) for j in pairs] == [5, 5, 5, 2]
    assert set(pairs[:2]) == {0, 1} and pairs[2] == pairs[0]  # cyclic once the two fives are used
    assert pairs == pair_images([5, 5, 5, 2], image_labels, seed=3)
    with pytest.raises(ValueError, match="no image of digit 7"):
        pair_images([7], image_labels, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"audio_snr_db": float("nan")}, "audio_snr_db must be a finite"),
        ({"audio_snr_db": float("inf")}, "audio_snr_db must be a finite"),
        ({"image_occlusion": 0}, r"image_occlusion .* \[1, 28\]"),
        ({"image_occlusion": 29}, r"image_occlusion .* \[1, 28\]"),
        ({"image_noise": 0.0}, "image_noise .* > 0"),
        ({"image_noise": -0.1}, "image_noise .* > 0"),
        ({"drop_modality": "video"}, r"drop_modality must be one of \['audio', 'image'\]"),
        ({"modality_dropout": 1.5}, r"modality_dropout is a probability in \[0, 1\]"),
        ({"corrupt": "audio"}, r"corrupt says which modalities .* \['both', 'one'\]; got 'audio'"),
        ({"test_speakers": []}, "test_speakers is empty"),
        ({"image_val_size": 0}, "val_size"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AVDigitsDataModule(**kwargs)


def test_missing_data_names_the_expected_folders(root: Path, tmp_path: Path) -> None:
    dm = AVDigitsDataModule(root=tmp_path, download=False)
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert str(tmp_path / "MNIST" / "raw") in message and str(tmp_path / "fsdd" / "recordings") in message
    assert "ATTNMM_DATA" in message
    _write_mnist(tmp_path / "MNIST" / "raw", "t10k", 10)
    with pytest.raises(FileNotFoundError, match=r"download=False.*ATTNMM_DATA"):
        dm.prepare_data()
    with pytest.raises(RuntimeError, match=r"setup\('fit'\)"):
        dm.train_dataloader()


def test_repr_and_summary(root: Path) -> None:
    dm = AVDigitsDataModule(root=root, download=False, image_val_size=100, image_occlusion=6)
    assert repr(dm) == f"AVDigitsDataModule(root='{root.as_posix()}', split=own, batch_size=32, image_occlusion=6)"
    dm.setup("test")
    assert repr(dm).endswith("image_occlusion=6, test=150)")
    dm.setup("fit")
    assert repr(dm).endswith("image_occlusion=6, train=80, val=10, test=150)")
    summary = dm.summary()
    assert str(dm) == summary
    assert "240 recordings, speakers: ann, bob, cid" in summary
    assert "MNIST at" in summary and "(full): train 200, val 100, test 200 images" in summary
    assert "corruptions: occluded square of side 6" in summary
    assert "train 80 pairs, val 10 pairs, test 150 pairs" in summary


@pytest.mark.data
def test_real_avdigits() -> None:
    data = os.environ.get("ATTNMM_DATA")
    if not data:
        pytest.skip("ATTNMM_DATA is unset; set it to a folder holding fsdd/recordings and MNIST/raw to run this test")
    if not (Path(data) / "fsdd" / "recordings").is_dir() or not (Path(data) / "MNIST" / "raw").is_dir():
        pytest.skip(f"no fsdd/recordings or MNIST/raw under $ATTNMM_DATA ({data})")
    dm = AVDigitsDataModule(download=False, batch_size=64, audio_snr_db=10.0, image_occlusion=8)
    dm.setup()
    mnist = MNISTDataModule()
    mnist.setup()
    assert len(dm.test_set) == 250 and len(dm.train_set) + len(dm.val_set) == 2250
    assert all(_take_index(n) < 5 for n in _recordings(dm.test_set))
    assert torch.equal(dm.test_set.images, mnist.datasets["test"].tensors[0])
    test_labels = mnist.datasets["test"].tensors[1]
    assert [int(test_labels[j]) for j in dm.test_set.pairs] == dm.test_set.clips.labels
    train_images = {bytes(dm.train_set.images[j].flatten().tolist()) for j in dm.train_set.pairs}
    test_images = {bytes(dm.test_set.images[j].flatten().tolist()) for j in dm.test_set.pairs}
    assert not train_images & test_images
    batch = next(iter(dm.test_dataloader()))
    assert batch["image"].shape == (64, 1, 28, 28) and bool(batch["audio_present"].all())
    again = next(iter(dm.test_dataloader()))
    assert torch.equal(batch["waveform"], again["waveform"]) and torch.equal(batch["image"], again["image"])


def test_val_speakers_validate_on_unheard_voices(root: Path) -> None:
    dm = _dm(root, val_speakers=["cid"])
    val, train, test = _recordings(dm.val_set), _recordings(dm.train_set), _recordings(dm.test_set)
    assert {n.split("_")[1] for n in val} == {"cid"} and all(_take_index(n) >= 5 for n in val)
    assert {n.split("_")[1] for n in train} == {"ann", "bob"} and len(train) == 2 * 10 * 3
    assert len(test) == 150  # the dataset's own test takes of every speaker
    assert "val_speakers=['cid']" in repr(dm)


def test_test_pairs_per_recording_pairs_each_test_recording_k_times(root: Path) -> None:
    one, four = _dm(root, test_seed=5), _dm(root, test_seed=5, test_pairs_per_recording=4)
    ds = four.test_set
    assert len(ds) == 4 * len(one.test_set) == 600
    n = len(ds.clips)
    images = _images(ds)
    for i in range(len(ds)):
        item = ds[i]
        assert item["label"] == ds.clips.labels[i % n] == _image_digit(item["image"])  # recording i mod n
        assert torch.equal(item["waveform"], ds[i % n]["waveform"])
    for r in range(n):  # each recording with 4 distinct images (each digit has 20 test images, 15 recordings)
        assert len({images[r + k * n] for k in range(4)}) == 4
    assert len(set(images)) == 200  # every test image used (600 pairs over 200 images: reused only when short)
    assert images[:n] == _images(one.test_set)  # the first pairs are the one-pair draw's
    noisy = _dm(root, test_seed=5, test_pairs_per_recording=4, audio_snr_db=0.0).test_set
    assert not torch.equal(noisy[0]["waveform"], noisy[n]["waveform"])  # each pair its own noise
    assert len(four.val_set) == len(one.val_set) and len(four.train_set) == len(one.train_set)
    with pytest.raises(ValueError, match="test_pairs_per_recording"):
        AVDigitsDataModule(test_pairs_per_recording=0)


def test_fresh_train_images_draw_any_training_image_of_the_digit(root: Path) -> None:
    fixed, fresh = _dm(root), _dm(root, fresh_train_images=True)
    torch.manual_seed(0)
    seen: dict[int, set[int]] = {}
    for _ in range(6):
        for i in range(len(fresh.train_set)):
            item = fresh.train_set[i]
            part, index = _image_id(item["image"])
            assert part == TRAIN and index < 200 and _image_digit(item["image"]) == item["label"]
            seen.setdefault(item["label"], set()).add(index)
    # far more than the 8 images of a digit's 8 fixed pairs: drawn from the whole pool (20 per digit)
    assert all(len(s) >= 15 for s in seen.values())
    assert len(set(_images(fixed.train_set))) == 80  # fixed pairs: one image per recording
    for split in ("val", "test"):  # evaluation pairs stay fixed
        assert _images(getattr(fresh, f"{split}_set")) == _images(getattr(fixed, f"{split}_set"))
        assert torch.equal(getattr(fresh, f"{split}_set")[3]["image"], getattr(fixed, f"{split}_set")[3]["image"])


def test_train_corruption_touches_training_pairs_only(root: Path) -> None:
    from attnmm.data import RandomCorruption

    clean = _dm(root)
    dm = _dm(root, train_corruption=RandomCorruption(audio_p=1.0, image_p=1.0, occlusion_share=1.0))
    torch.manual_seed(0)
    for i in range(0, 80, 9):
        item, ref = dm.train_set[i], clean.train_set[i]
        assert not torch.equal(item["waveform"], ref["waveform"])
        assert 36 <= int((item["image"] == 0).sum()) <= 400  # an occluded square of side 6..20
    for split in ("val", "test"):
        a, b = getattr(dm, f"{split}_set"), getattr(clean, f"{split}_set")
        assert all(torch.equal(a[i]["waveform"], b[i]["waveform"]) and torch.equal(a[i]["image"], b[i]["image"])
                   for i in range(len(a)))
    assert "random corruption RandomCorruption(audio_p=1" in dm.summary()


@pytest.mark.parametrize(
    ("options", "audio", "image"),
    [
        ({"audio_snr_db": -5.0}, "noisy", "clean"),
        ({"image_occlusion": 14}, "clean", "changed"),
        ({"image_noise": 0.5}, "clean", "changed"),
        ({"audio_snr_db": 0.0, "image_occlusion": 14}, "noisy", "changed"),
        ({"drop_modality": "audio"}, "missing", "clean"),
        ({"drop_modality": "image"}, "clean", "missing"),
    ],
)
def test_each_condition_corrupts_what_it_says(root: Path, options: dict, audio: str, image: str) -> None:
    """The evaluation conditions: each touches its modality only; missing is the present flag (no token)."""
    from attnmm.adapters import MultimodalAdapter

    clean = _dm(root, test_pairs_per_recording=2).test_set
    ds = _dm(root, test_pairs_per_recording=2, **options).test_set
    for i in range(0, len(ds), 11):
        item, ref = ds[i], clean[i]
        same_audio = torch.equal(item["waveform"], ref["waveform"])
        same_image = torch.equal(item["image"], ref["image"])
        assert same_audio == (audio == "clean") and same_image == (image == "clean")
        assert item["audio_present"] == (audio != "missing") and item["image_present"] == (image != "missing")
        if audio == "noisy":
            assert _snr_db(ref["waveform"], item["waveform"]) == pytest.approx(options["audio_snr_db"], abs=1e-3)
    batch = next(iter(_loader(ds)))
    # the generated clips are shorter than one frame: repeat them so that present audio gives frames
    batch["waveform"], batch["lengths"] = batch["waveform"].repeat(1, 40), batch["lengths"] * 40
    tokens = MultimodalAdapter(d_model=16, fusion="late")(batch)
    lengths = tokens.mask.lengths  # (B, 2): audio frames, image patches; 0 where the modality is missing
    assert bool((lengths[:, 0] == 0).all()) == (audio == "missing")
    assert bool((lengths[:, 1] == 0).all()) == (image == "missing")
    assert bool((lengths > 0).any(1).all())  # never both


def _loader(ds: AVDigits) -> torch.utils.data.DataLoader:
    from attnmm.data.avdigits import collate_avdigits

    return torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=collate_avdigits)


@pytest.mark.parametrize("full", [False, True])
def test_digit_voices_read_both_layouts(tmp_path: Path, full: bool) -> None:
    from attnmm.data.speech_commands import digit_voices

    write_voices(tmp_path / "sc", full=full)
    voices = digit_voices(tmp_path / "sc")
    assert len(voices) == 12 and {v.word for v in voices} == {"three", "seven"}  # marvin and yes are no digits
    assert {v.speaker for v in voices} == {f"p{s:03d}" for s in range(6)}
    with pytest.raises(FileNotFoundError, match="no Speech Commands folder"):
        digit_voices(tmp_path / "absent")
    (tmp_path / "empty" / "yes").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="holds no spoken digit"):
        digit_voices(tmp_path / "empty")


def test_gate_voices_train_the_gate_only_and_hold_out_speakers(root: Path, tmp_path: Path) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(root, data)
    write_voices(data / "voices")
    plain = _dm(data)
    dm = _dm(data, gate_voices="voices", gate_voices_val=0.5, gate_voices_repeats=3)  # relative: under the root
    train, held = dm.gate_speakers["train"], dm.gate_speakers["val"]
    assert len(train) == len(held) == 3 and not set(train) & set(held)
    assert dm.gate_speakers == _dm(data, gate_voices="voices", gate_voices_repeats=3).gate_speakers  # seeded
    assert len(dm.train_set) == len(plain.train_set) + 3 * 2 * len(train)  # two digits per speaker, 3 repeats
    assert len(dm.val_set) == len(plain.val_set) and dm.gate_val_set is not None and len(dm.gate_val_set) == 6
    flags = [bool(dm.train_set[i]["gate_only"]) for i in range(len(dm.train_set))]
    assert sum(flags) == 3 * 2 * len(train) and not any(flags[: len(plain.train_set)])
    gate_item = dm.train_set[len(plain.train_set)]
    assert gate_item["waveform"].numel() in (800, 880)  # 16 kHz clips read at 8 kHz
    assert _image_digit(gate_item["image"]) == gate_item["label"] and gate_item["label"] in (3, 7)
    assert "gate_only" not in dm.val_set[0] and "gate_only" not in dm.gate_val_set[0]
    batch = next(iter(dm.train_dataloader()))
    assert batch["gate_only"].dtype == torch.bool and batch["gate_only"].shape == batch["label"].shape
    assert "gate_only" not in next(iter(dm.val_dataloader()))
    assert "gate voices at voices: 3 speakers' digits train the gate only" in dm.summary()
    assert "gate_voices='voices'" in repr(dm)
    late = AVDigitsDataModule(root=data, download=False, image_val_size=100, gate_voices="voices")
    late.setup("validate")  # validation first, then fit: the training pairs still get the gate voices, once
    assert late.gate_val_set is not None
    late.setup("fit")
    late.setup("fit")
    assert len(late.train_set) == len(plain.train_set) + 4 * 2 * len(train)
    with pytest.raises(ValueError, match=r"gate_voices_val is a share in \[0, 1\)"):
        AVDigitsDataModule(gate_voices="voices", gate_voices_val=1.0)
    with pytest.raises(ValueError, match="gate_voices_repeats is a whole number"):
        AVDigitsDataModule(gate_voices="voices", gate_voices_repeats=0)
    with pytest.raises(FileNotFoundError, match="no Speech Commands folder"):
        _dm(data, gate_voices="nowhere")


def _clip_digit(waveform: torch.Tensor) -> int:
    return round(float(waveform[0]) / 0.05) - 1  # the generated clips' constant value encodes the digit


def test_gate_conflicts_pair_a_recording_with_another_digits_image_for_the_gate_only(root: Path) -> None:
    from attnmm.data.avdigits import ConflictPairs

    plain = _dm(root)
    dm = _dm(root, gate_conflicts=0.5)
    n = len(plain.train_set)
    assert dm.conflict_set is not None and len(dm.conflict_set) == round(0.5 * n)
    assert len(dm.train_set) == n + len(dm.conflict_set) and len(dm.val_set) == len(plain.val_set)
    items = [dm.train_set[i] for i in range(n, len(dm.train_set))]
    for item in items:  # another digit's recording, a clean training image of the label's digit, gate only
        assert item["gate_only"] is True and item["audio_present"] and item["image_present"]
        assert _image_digit(item["image"]) == item["label"] != _clip_digit(item["waveform"])
        assert _image_id(item["image"])[0] == TRAIN
    assert len({int(item["label"]) for item in items}) > 3  # the digits vary
    assert not any(bool(dm.train_set[i].get("gate_only")) for i in range(0, n, 7))  # FSDD pairs train everything
    batch = next(iter(dm.train_dataloader()))
    assert batch["gate_only"].dtype == torch.bool
    dm.setup("fit")  # once only
    assert len(dm.train_set) == n + len(dm.conflict_set)
    assert "conflict pairs (gate only): 0.5 x the training recordings" in dm.summary()
    assert "gate_conflicts=0.5" in repr(dm)
    assert "gate_only" not in dm.val_set[0]
    for bad in (-0.1, True, "0.2"):
        with pytest.raises(ValueError, match="gate_conflicts is a share >= 0"):
            AVDigitsDataModule(gate_conflicts=bad)
    clips = dm.conflict_set.clips
    images, labels = dm.mnist.datasets["train"].tensors
    with pytest.raises(ValueError, match="size is a whole number >= 1"):
        ConflictPairs(clips, images, labels, 0)
    with pytest.raises(ValueError, match="at least two digits in common"):
        ConflictPairs(clips, images[labels == 3], labels[labels == 3], 4)
    seeded = ConflictPairs(clips, images, labels, 4, seed=5)
    assert torch.equal(seeded[2]["image"], ConflictPairs(clips, images, labels, 4, seed=5)[2]["image"])
