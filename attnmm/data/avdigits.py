r"""Audio-visual digits: each FSDD spoken digit paired with an MNIST image of the same digit."""

from __future__ import annotations

from pathlib import Path

from torch.utils.data import ConcatDataset, DataLoader

from attnmm.data._audio import AudioClips, word_clips
from attnmm.data._avpairs import (
    _SPLIT_SEED,
    AVDigits,
    AVDigitsBatch,
    ConflictPairs,
    Corrupt,
    Modality,
    _check_counts,
    _check_options,
    collate_avdigits,
    pair_images,
)
from attnmm.data._resumable import ResumableDataLoader, SplitLoaders
from attnmm.data._root import data_dir, under_data
from attnmm.data._speakers import draw_speakers
from attnmm.data.corruptions import RandomCorruption
from attnmm.data.fsdd import CLASS_NAMES, FSDDDataModule
from attnmm.data.mnist import MNISTDataModule
from attnmm.data.speech_commands import digit_voices

__all__ = ["AVDigits", "AVDigitsBatch", "AVDigitsDataModule", "Corrupt", "Modality", "collate_avdigits",
           "pair_images"]


class AVDigitsDataModule(SplitLoaders):
    r"""Audio-visual digits: every recording of the Free Spoken Digit Dataset paired with an MNIST image
    of the same digit, for multimodal fusion and robustness experiments.

    Both datasets are read from one data folder (:func:`~attnmm.data.data_dir`), each split its own way:
    the recordings from ``fsdd/recordings`` as :class:`~attnmm.data.FSDDDataModule` splits them, the
    images from ``MNIST/raw`` as :class:`~attnmm.data.MNISTDataModule` does, so the **test images are
    MNISTDataModule's test set** (``image_val_size`` of its training images validate).

    Each recording of a split is paired with an image of the same digit from the same split
    (:func:`pair_images`): no recording and no image is in two splits. There is one example per
    recording (``test_pairs_per_recording`` = k: k test pairs per test recording, each with another
    image and its own corruption draws); images are distinct within a split while it has enough of the
    digit. The training and validation pairs are drawn from ``seed``, the test pairs from ``test_seed``
    (a fixed test set whatever the training seed). With ``fresh_train_images`` a training recording
    meets a new image of its digit at every access, drawn from all the training images.

    The corruptions (``audio_snr_db``, ``image_noise``, ``image_occlusion``, ``corrupt``, described at
    :class:`AVDigits`) apply to every split: drawn afresh in training, the same for each validation and
    test example in every epoch and run, so a second DataModule that differs only in the corruptions has
    the same pairs. ``drop_modality`` removes one modality from every **test** example and
    ``modality_dropout`` one from a training example with that probability (the batch flags them);
    ``train_corruption`` (a :class:`~attnmm.data.RandomCorruption`) corrupts training pairs at random.

    ``gate_voices`` (a Speech Commands folder, see :func:`digit_voices`) adds gate-only training pairs of
    voices the model never learns from, and ``gate_conflicts`` gate-only :class:`ConflictPairs` (a
    training recording beside a clean image of another digit); ``gate_voices_val`` of those speakers
    form :attr:`gate_val_set`. Why and how: the multimodal recipe page (docs/recipes/multimodal.md).

    Batches are :class:`AVDigitsBatch` dicts.

    Args:
        root (str or Path, optional): the base data folder holding ``fsdd/`` and ``MNIST/``.
            (default: :obj:`None`)
        batch_size (int, optional): pairs per batch. (default: ``32``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        test_speakers (list[str], optional): speakers whose recordings are the test set.
            (default: :obj:`None`, the dataset's own split)
        val_fraction (float, optional): share of the training recordings used for validation.
            (default: ``0.1``)
        image_val_size (int, optional): MNIST training images kept for validation, as
            ``MNISTDataModule(val_size=...)``. (default: ``1000``)
        seed (int, optional): seed of the validation split and of the training and validation pairs
            and corruptions. (default: ``0``)
        test_seed (int, optional): seed of the test pairs and corruptions. (default: ``0``)
        audio_snr_db (float, optional): signal-to-noise ratio in dB of white noise added to the
            recordings. (default: :obj:`None`, no noise)
        image_occlusion (int, optional): side in pixels of a square zeroed in each image.
            (default: :obj:`None`, no occlusion)
        image_noise (float, optional): standard deviation of Gaussian noise added to the pixels
            (in [0, 1]). (default: :obj:`None`, no noise)
        drop_modality (str, optional): ``"audio"`` or ``"image"``, removed from every test example.
            (default: :obj:`None`)
        modality_dropout (float, optional): probability that a training example loses one modality.
            (default: ``0.0``)
        corrupt (str, optional): ``"both"``: the corruptions touch both modalities of every example;
            ``"one"``: one of the two, drawn per example. (default: ``"both"``)
        download (bool, optional): download the FSDD recordings when missing (MNIST is never
            downloaded). (default: :obj:`True`)
        val_speakers (list[str], optional): speakers whose takes (outside the test set) are the
            validation set, never trained on. (default: :obj:`None`, a ``val_fraction`` draw)
        test_pairs_per_recording (int, optional): test pairs per test recording. (default: ``1``)
        fresh_train_images (bool, optional): draw a training pair's image afresh at every access.
            (default: :obj:`False`)
        train_corruption (RandomCorruption, optional): random corruption of the training pairs.
            (default: :obj:`None`)
        gate_voices (str or Path, optional): a Speech Commands folder whose spoken digits train the gate
            only; a relative path is read under the data folder. (default: :obj:`None`)
        gate_voices_val (float, optional): share of its speakers kept out of training, for
            :attr:`gate_val_set`. (default: ``0.5``)
        gate_voices_repeats (int, optional): pairs per gate clip per epoch. (default: ``4``)
        gate_conflicts (float, optional): gate-only conflict pairs per epoch, as a share of the training
            recordings (needs a gated head). (default: ``0.0``, none)

    Examples:
        >>> dm = AVDigitsDataModule(root="/data", audio_snr_db=5.0, drop_modality="image")
        >>> dm
        AVDigitsDataModule(root='/data', split=own, batch_size=32, audio_snr_db=5.0, drop_modality='image')
        >>> dm.num_classes, dm.sample_rate, dm.image_size
        (10, 8000, (1, 28, 28))
    """

    num_classes: int = len(CLASS_NAMES)
    class_names: tuple[str, ...] = CLASS_NAMES
    sample_rate: int = FSDDDataModule.sample_rate
    image_size: tuple[int, int, int] = MNISTDataModule.image_size

    def __init__(
        self, root: str | Path | None = None, batch_size: int = 32, num_workers: int = 0,
        test_speakers: list[str] | None = None, val_fraction: float = 0.1, image_val_size: int = 1000, seed: int = 0,
        test_seed: int = 0, audio_snr_db: float | None = None, image_occlusion: int | None = None,
        image_noise: float | None = None, drop_modality: Modality | None = None, modality_dropout: float = 0.0,
        corrupt: Corrupt = "both", download: bool = True, val_speakers: list[str] | None = None,
        test_pairs_per_recording: int = 1, fresh_train_images: bool = False,
        train_corruption: RandomCorruption | None = None, gate_voices: str | Path | None = None,
        gate_voices_val: float = 0.5, gate_voices_repeats: int = 4, gate_conflicts: float = 0.0,
    ) -> None:
        super().__init__()
        _check_options(audio_snr_db, image_occlusion, image_noise, drop_modality, modality_dropout, corrupt)
        _check_counts(gate_conflicts, gate_voices_val, gate_voices_repeats, test_pairs_per_recording)
        self.fsdd = FSDDDataModule(
            root, batch_size, num_workers, test_speakers, val_fraction, seed, download, val_speakers=val_speakers
        )
        self.mnist = MNISTDataModule(root, batch_size, image_val_size, augment=False, num_workers=num_workers)
        self.root, self.batch_size, self.num_workers = root, batch_size, num_workers
        self.test_speakers, self.seed, self.test_seed = self.fsdd.test_speakers, seed, test_seed
        self.audio_snr_db, self.image_occlusion, self.image_noise = audio_snr_db, image_occlusion, image_noise
        self.drop_modality, self.modality_dropout, self.corrupt = drop_modality, modality_dropout, corrupt
        self.val_speakers, self.test_pairs_per_recording = self.fsdd.val_speakers, test_pairs_per_recording
        self.fresh_train_images, self.train_corruption = fresh_train_images, train_corruption
        self.gate_voices, self.gate_voices_val = gate_voices, float(gate_voices_val)
        self.gate_voices_repeats = gate_voices_repeats
        self.gate_conflicts = float(gate_conflicts)
        self.train_set: AVDigits | ConcatDataset | None = None
        self.val_set: AVDigits | None = None
        self.test_set: AVDigits | None = None
        #: The held-out gate voices' pairs (``gate_voices``; after ``setup``), else :obj:`None`.
        self.gate_val_set: AVDigits | None = None
        #: Speakers of the gate voices by split, ``{"train": [...], "val": [...]}`` (after ``setup``).
        self.gate_speakers: dict[str, list[str]] = {}
        self._gate_clips: dict[str, AudioClips] = {}
        #: The gate-only conflict pairs (``gate_conflicts``; after ``setup('fit')``), else :obj:`None`.
        self.conflict_set: ConflictPairs | None = None

    def prepare_data(self) -> None:
        try:
            self.mnist.prepare_data()
        except FileNotFoundError as err:  # say what else is missing before any download of the recordings
            recordings = self.fsdd.dataset_dir / "recordings"
            also = "" if any(recordings.glob("*.wav")) else (
                f" The FSDD recordings are missing too: put the {{digit}}_{{speaker}}_{{index}}.wav files at "
                f"{recordings}."
            )
            raise FileNotFoundError(
                f"audio-visual digits need both datasets under one data folder, {data_dir(self.root)}: "
                f"fsdd/recordings/*.wav and MNIST/raw/t10k-*-ubyte[.gz]. {err}.{also}"
            ) from err
        self.fsdd.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        self.prepare_data()
        self.mnist.setup()
        self.fsdd.setup(stage)
        for split in ("train", "val", "test"):
            clips = getattr(self.fsdd, f"{split}_set")
            if clips is not None and getattr(self, f"{split}_set") is None:
                setattr(self, f"{split}_set", self._pairs(split, clips))
        if self.gate_voices is not None and stage in (None, "fit", "validate"):
            self._gate_sets()
        if self.gate_conflicts > 0 and stage in (None, "fit") and isinstance(self.train_set, (AVDigits, ConcatDataset)):
            self._add_conflicts()

    def _add_conflicts(self) -> None:
        """Join :class:`ConflictPairs` to ``train_set`` (once): ``gate_conflicts`` x the training recordings."""
        parts = self.train_set.datasets if isinstance(self.train_set, ConcatDataset) else [self.train_set]
        if any(isinstance(part, ConflictPairs) for part in parts):
            return
        base = parts[0]
        assert isinstance(base, AVDigits)
        base.gate_only = False
        images, image_labels = self.mnist.datasets["train"].tensors
        size = max(1, round(self.gate_conflicts * len(base.clips)))
        self.conflict_set = ConflictPairs(base.clips, images, image_labels, size)
        self.train_set = ConcatDataset([*parts, self.conflict_set])

    def _gate_sets(self) -> None:
        """The gate voices: their training speakers' pairs join ``train_set`` (marked gate-only, once), the
        held-out speakers' make :attr:`gate_val_set`; the folder is read at the first call."""
        if not self._gate_clips:
            self._gate_clips = self._read_gate_voices()
        train, val = self._gate_clips.get("train"), self._gate_clips.get("val")
        if train is not None and isinstance(self.train_set, AVDigits):  # not wrapped yet (nor absent)
            self.train_set.gate_only = False
            self.train_set = ConcatDataset(
                [self.train_set] + [self._pairs("train", train, gate=True)] * self.gate_voices_repeats
            )
        if val is not None and self.gate_val_set is None:
            self.gate_val_set = self._pairs("val", val)

    def _read_gate_voices(self) -> dict[str, AudioClips]:
        """The gate voices' clips by split (``train``: speakers that train the gate; ``val``: held out)."""
        voices = digit_voices(under_data(self.root, self.gate_voices))  # type: ignore[arg-type]
        held = draw_speakers(sorted({str(c.speaker) for c in voices}), self.gate_voices_val, [self.seed, 7],
                             "gate_voices_val")
        self.gate_speakers = {"train": sorted({str(c.speaker) for c in voices} - held), "val": sorted(held)}
        clips = {}
        for split, chosen in (("train", False), ("val", True)):
            picked = [c for c in voices if (c.speaker in held) == chosen]
            if picked:  # Speech Commands is 16 kHz: read at the recordings' 8 kHz
                clips[split] = word_clips(picked, CLASS_NAMES, self.sample_rate)
        return clips

    def _pairs(self, split: str, clips: AudioClips, gate: bool = False) -> AVDigits:
        images, image_labels = self.mnist.datasets[split].tensors
        seed = 3 * (self.test_seed if split == "test" else self.seed) + _SPLIT_SEED[split] + (1000 if gate else 0)
        repeats = self.test_pairs_per_recording if split == "test" else 1
        train = split == "train"
        return AVDigits(
            clips, images, pair_images(clips.labels * repeats, image_labels, seed), self.audio_snr_db,
            self.image_occlusion, self.image_noise, drop_modality=self.drop_modality if split == "test" else None,
            modality_dropout=self.modality_dropout if train else 0.0, seed=None if train else seed,
            corrupt=self.corrupt, resample_images=self.fresh_train_images and train,
            augment=self.train_corruption if train else None, image_labels=image_labels,
            gate_only=True if gate else None,
        )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        dataset = getattr(self, f"{split}_set")
        if dataset is None:
            raise RuntimeError(f"the {split} set is not loaded; call dm.setup('{'fit' if shuffle else 'test'}') first")
        # training: resumable mid-epoch (the same batches after a crash and resume)
        return (ResumableDataLoader if shuffle else DataLoader)(
            dataset, self.batch_size, shuffle=shuffle, num_workers=self.num_workers, collate_fn=collate_avdigits
        )

    @property
    def speakers(self) -> list[str]:
        r"""The speakers found in the recordings (after :meth:`setup`)."""
        return self.fsdd.speakers

    def _options(self) -> dict[str, object]:
        options = {
            "audio_snr_db": self.audio_snr_db,
            "image_occlusion": self.image_occlusion,
            "image_noise": self.image_noise,
            "drop_modality": self.drop_modality,
            "modality_dropout": self.modality_dropout or None,
            "corrupt": None if self.corrupt == "both" else self.corrupt,
            "val_speakers": self.val_speakers,
            "test_pairs_per_recording": None if self.test_pairs_per_recording == 1 else self.test_pairs_per_recording,
            "fresh_train_images": self.fresh_train_images or None,
            "train_corruption": self.train_corruption,
            "gate_voices": None if self.gate_voices is None else Path(self.gate_voices).as_posix(),
            "gate_conflicts": self.gate_conflicts or None,
        }
        return {k: v for k, v in options.items() if v is not None}

    def _sets(self) -> dict[str, AVDigits | ConcatDataset]:
        sets = {"train": self.train_set, "val": self.val_set, "test": self.test_set}
        return {k: v for k, v in sets.items() if v is not None}

    def __repr__(self) -> str:
        split = "own" if self.test_speakers is None else f"test_speakers={self.test_speakers}"
        options = "".join(f", {k}={v!r}" for k, v in self._options().items())
        sizes = "".join(f", {k}={len(v)}" for k, v in self._sets().items())
        return (
            f"{type(self).__name__}(root={data_dir(self.root).as_posix()!r}, split={split}, "
            f"batch_size={self.batch_size}{options}{sizes})"
        )

    def summary(self) -> str:
        r"""A few lines on the data found, the splits, the pairing and the corruptions."""
        lines = [f"Audio-visual digits at {data_dir(self.root)}: FSDD recordings paired with MNIST images"]
        lines += ["  " + line for line in self.fsdd.summary().splitlines()]
        images = self.mnist.raw_dir
        if self.mnist.split is None:
            lines.append(f"  MNIST at {images}: the image recipe's split (test images = MNISTDataModule's test set)")
        else:
            sizes = ", ".join(f"{k} {len(v)}" for k, v in self.mnist.datasets.items())
            lines.append(f"  MNIST at {images} ({self.mnist.split}): {sizes} images")
        lines.append(
            f"  pairs: one per recording, an image of its digit from the same split; seed {self.seed} "
            f"(train/val), test seed {self.test_seed}"
        )
        corruptions = [
            f"audio noise at {self.audio_snr_db:g} dB SNR" if self.audio_snr_db is not None else "",
            f"image noise std {self.image_noise:g}" if self.image_noise is not None else "",
            f"occluded square of side {self.image_occlusion}" if self.image_occlusion is not None else "",
        ]
        touched = "" if self.corrupt == "both" else " (one modality per pair, drawn per pair)"
        listed = ", ".join(c for c in corruptions if c)
        lines.append("  corruptions: " + (listed + touched if listed else "none"))
        lines.append(
            f"  missing modalities: test drops {self.drop_modality or 'none'}, training modality dropout "
            f"{self.modality_dropout:g}"
        )
        if self.fresh_train_images or self.train_corruption is not None:
            fresh = "a fresh image per access" if self.fresh_train_images else "fixed pairs"
            lines.append(f"  training pairs: {fresh}; random corruption {self.train_corruption or 'none'}")
        if self.gate_voices is not None:
            if self.gate_speakers:
                train, val = self.gate_speakers["train"], self.gate_speakers["val"]
                held = f"{len(self.gate_val_set or ())} pairs of {len(val)} held-out speakers (gate_val_set)"
                lines.append(
                    f"  gate voices at {self.gate_voices}: {len(train)} speakers' digits train the gate only, "
                    f"{self.gate_voices_repeats} pairs per clip per epoch; {held}"
                )
            else:
                lines.append(f"  gate voices at {self.gate_voices} (read at setup('fit'))")
        if self.gate_conflicts:
            made = "" if self.conflict_set is None else f": {len(self.conflict_set)} per epoch"
            lines.append(
                f"  conflict pairs (gate only): {self.gate_conflicts:g} x the training recordings{made}, a "
                "recording beside a clean image of another digit, labelled by the image"
            )
        if self._sets():
            lines.append("  " + ", ".join(f"{k} {len(v)} pairs" for k, v in self._sets().items()))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
