r"""Audio-visual digits: each FSDD spoken digit paired with an MNIST image of the same digit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypedDict, get_args

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from attnmm.data._audio import AudioClips, collate_audio
from attnmm.data._resumable import ResumableDataLoader
from attnmm.data._root import data_dir
from attnmm.data.corruptions import RandomCorruption, add_audio_noise, add_image_noise, occlude
from attnmm.data.fsdd import CLASS_NAMES, FSDDDataModule
from attnmm.data.mnist import MNISTDataModule
from attnmm.data.speech_commands import digit_voices

__all__ = [
    "AVDigits",
    "AVDigitsBatch",
    "AVDigitsDataModule",
    "Corrupt",
    "Modality",
    "collate_avdigits",
    "pair_images",
]

Modality = Literal["audio", "image"]
#: Which modalities of an item the corruptions touch: ``"both"``, or ``"one"`` of the two, drawn per item.
Corrupt = Literal["both", "one"]
#: Per-split offsets of the seeds, so that the splits' pairings and corruptions differ.
_SPLIT_SEED = {"train": 0, "val": 1, "test": 2}
#: Independent random streams per example, one per kind of draw: turning one corruption on does not
#: change the draws of another.
_DRAW = {"drop": 0, "audio_noise": 1, "image_noise": 2, "occlusion": 3, "corrupt": 4, "augment": 5, "image": 6}


def pair_images(labels: Sequence[int], image_labels: Tensor, seed: int) -> list[int]:
    r"""For each audio label, the index of an image with the same label, deterministically given ``seed``.

    The images of each digit are shuffled (a generator seeded by ``seed``) and handed out in that order
    to the recordings of the digit, in their order; only when a digit has more recordings than images
    does an image serve again (cyclically).

    Args:
        labels (Sequence[int]): the digit of each recording.
        image_labels (Tensor): (N,) the digit of each image of the pool.
        seed (int): seed of the shuffles.

    Raises:
        ValueError: a digit of ``labels`` has no image in the pool.

    Examples:
        >>> import torch
        >>> pairs = pair_images([3, 1, 3], torch.tensor([1, 3, 3, 0]), seed=0)
        >>> [int(torch.tensor([1, 3, 3, 0])[j]) for j in pairs]
        [3, 1, 3]
        >>> len(set(pairs))  # distinct images while there are enough
        3
    """
    generator = torch.Generator().manual_seed(seed % 2**63)
    pairs = [-1] * len(labels)
    for digit in sorted(set(labels)):
        pool = (image_labels == digit).nonzero().flatten()
        if pool.numel() == 0:
            raise ValueError(
                f"no image of digit {digit} to pair with its {labels.count(digit)} recordings; the image split "
                "must hold every digit (check the MNIST files and image_val_size)"
            )
        order = pool[torch.randperm(pool.numel(), generator=generator)].tolist()
        for k, i in enumerate(i for i, y in enumerate(labels) if y == digit):
            pairs[i] = order[k % len(order)]
    return pairs


def _check_options(
    audio_snr_db: float | None,
    image_occlusion: int | None,
    image_noise: float | None,
    drop_modality: str | None,
    modality_dropout: float,
    corrupt: str = "both",
) -> None:
    side = MNISTDataModule.image_size[-1]
    if audio_snr_db is not None and (isinstance(audio_snr_db, bool) or not math.isfinite(audio_snr_db)):
        raise ValueError(f"audio_snr_db must be a finite number of dB (e.g. 10.0) or None, got {audio_snr_db!r}")
    if image_occlusion is not None and not (
        isinstance(image_occlusion, int) and not isinstance(image_occlusion, bool) and 1 <= image_occlusion <= side
    ):
        raise ValueError(
            f"image_occlusion is the side of the zeroed square in pixels, an int in [1, {side}], or None; "
            f"got {image_occlusion!r}"
        )
    if image_noise is not None and not (math.isfinite(image_noise) and image_noise > 0):
        raise ValueError(f"image_noise is the noise's standard deviation, > 0 (or None for none); got {image_noise!r}")
    if drop_modality is not None and drop_modality not in get_args(Modality):
        raise ValueError(f"drop_modality must be one of {list(get_args(Modality))} or None, got {drop_modality!r}")
    if not 0.0 <= modality_dropout <= 1.0:
        raise ValueError(f"modality_dropout is a probability in [0, 1], got {modality_dropout!r}")
    if corrupt not in get_args(Corrupt):
        raise ValueError(
            f"corrupt says which modalities of an item the corruptions touch, one of {list(get_args(Corrupt))}; "
            f"got {corrupt!r}"
        )


class AVDigits(Dataset):
    r"""Pairs of a spoken digit and an image of the same digit, optionally corrupted or missing a modality.

    Item ``i`` is the recording ``clips[i]`` and the image ``images[pairs[i]]`` (uint8, scaled to [0, 1]),
    a dict with ``waveform`` (T,), ``image`` (1, 28, 28), ``audio_present``, ``image_present`` and
    ``label``; batch items with :func:`collate_avdigits`. Corruptions, when set:

    - audio noise: white Gaussian noise scaled so that the clip's signal-to-noise ratio is exactly
      ``audio_snr_db`` dB, :math:`10 \log_{10}(\lVert\mathbf{w}\rVert^2 / \lVert\mathbf{n}\rVert^2)`
      (:func:`torchaudio.functional.add_noise`);
    - image noise: Gaussian noise of standard deviation ``image_noise`` added to the pixels, clipped
      to [0, 1];
    - occlusion: a square of ``image_occlusion`` pixels at a random position set to 0 (after the noise).

    With ``corrupt="both"`` every item gets all of them; with ``corrupt="one"`` each item gets the
    corruptions of one modality only, audio or image with equal chance (one sensor failing at a time),
    the other modality left clean.

    A missing modality is an empty waveform (length 0) or an all-zero image, with ``audio_present`` or
    ``image_present`` false. ``drop_modality`` removes one modality from every item; otherwise
    ``modality_dropout`` is the probability that an item loses one of the two, audio or image with equal
    chance (never both).

    The draws of item ``i`` come from generators seeded by ``(seed, i)``, so with a ``seed`` an item is
    corrupted the same way at every epoch and in every run; ``seed=None`` draws afresh at every access
    from torch's global generator (training: seeded by ``seed_everything``).

    ``pairs`` may hold a whole multiple ``k`` of the recordings: item ``i`` is then recording
    ``i mod n`` with image ``pairs[i]``, so each recording comes in ``k`` pairs with (while the digit has
    enough images) distinct images, each pair with its own draws. With ``resample_images`` the image of
    each access is instead drawn (from item ``i``'s generator) among all images of the item's digit, so
    that over the epochs a recording meets the whole image pool. ``augment`` (e.g. a
    :class:`~attnmm.data.corruptions.RandomCorruption`) then corrupts the item with its own generator.

    Args:
        clips (AudioClips): the recordings; their labels are the digits.
        images (Tensor): (N, 1, 28, 28) uint8, the image pool.
        pairs (Sequence[int]): for each recording, the index of its image in ``images``.
        audio_snr_db (float, optional): SNR of the added audio noise. (default: :obj:`None`, no noise)
        image_occlusion (int, optional): side of the zeroed square. (default: :obj:`None`, none)
        image_noise (float, optional): standard deviation of the image noise. (default: :obj:`None`, none)
        drop_modality (str, optional): ``"audio"`` or ``"image"``, removed from every item.
            (default: :obj:`None`)
        modality_dropout (float, optional): probability that an item loses a modality. (default: ``0.0``)
        seed (int, optional): seed of the per-item draws; :obj:`None` draws afresh. (default: ``0``)
        corrupt (str, optional): ``"both"`` modalities of every item are corrupted, or ``"one"`` of
            them, drawn per item. (default: ``"both"``)
        resample_images (bool, optional): draw each access's image among the pool's images of the
            item's digit instead of ``images[pairs[i]]``. (default: :obj:`False`)
        augment (RandomCorruption, optional): a random corruption applied to each item after the fixed
            ones, ``augment(item, generator)``. (default: :obj:`None`)
        image_labels (Tensor, optional): (N,) the digit of each image; needed by ``resample_images``.
            (default: :obj:`None`)
        gate_only (bool, optional): mark every item ``gate_only`` (:obj:`True`: it trains a gated head's
            gate only, see :class:`AVDigitsDataModule`'s ``gate_voices``) or not (:obj:`False`); with
            :obj:`None` items carry no such entry. (default: :obj:`None`)
    """

    def __init__(
        self,
        clips: AudioClips,
        images: Tensor,
        pairs: Sequence[int],
        audio_snr_db: float | None = None,
        image_occlusion: int | None = None,
        image_noise: float | None = None,
        drop_modality: Modality | None = None,
        modality_dropout: float = 0.0,
        seed: int | None = 0,
        corrupt: Corrupt = "both",
        resample_images: bool = False,
        augment: RandomCorruption | None = None,
        image_labels: Tensor | None = None,
        gate_only: bool | None = None,
    ) -> None:
        _check_options(audio_snr_db, image_occlusion, image_noise, drop_modality, modality_dropout, corrupt)
        if len(clips) == 0 or len(pairs) == 0 or len(pairs) % len(clips):
            raise ValueError(
                f"got {len(pairs)} pairs for {len(clips)} recordings; pass one image index per recording, or the "
                "same whole number k of them per recording (item i is recording i mod n)"
            )
        if images.dim() != 4 or images.dtype != torch.uint8:
            raise ValueError(
                f"images must be a (N, C, height, width) uint8 tensor, got {images.dtype} {tuple(images.shape)}"
            )
        self.clips, self.images, self.pairs = clips, images, list(pairs)
        self.audio_snr_db, self.image_occlusion, self.image_noise = audio_snr_db, image_occlusion, image_noise
        self.drop_modality, self.modality_dropout, self.seed = drop_modality, modality_dropout, seed
        self.corrupt, self.augment = corrupt, augment
        self.resample_images, self.gate_only = resample_images, gate_only
        self._by_digit: dict[int, Tensor] = {}
        if resample_images:
            if image_labels is None or len(image_labels) != len(images):
                raise ValueError("resample_images draws images of the item's digit: give image_labels, one per image")
            labels = self.clips.labels
            self._by_digit = {d: (image_labels == d).nonzero().flatten() for d in sorted(set(labels))}
            empty = [d for d, pool in self._by_digit.items() if pool.numel() == 0]
            if empty:
                raise ValueError(f"resample_images needs images of every digit; the pool has none of {empty}")

    def __len__(self) -> int:
        return len(self.pairs)

    def _rng(self, entropy: int, i: int, draw: str) -> np.random.Generator:
        return np.random.default_rng([entropy, i, _DRAW[draw]])

    def __getitem__(self, i: int) -> dict[str, Tensor | int | bool]:
        waveform, label = self.clips[i % len(self.clips)]
        entropy = self.seed % 2**63 if self.seed is not None else int(torch.randint(2**62, ()))
        j = self.pairs[i]
        if self.resample_images:
            pool = self._by_digit[int(label)]
            j = int(pool[int(self._rng(entropy, i, "image").integers(pool.numel()))])
        image = self.images[j].float() / 255.0  # (1, 28, 28)
        dropped = self.drop_modality
        if dropped is None and self.modality_dropout > 0:
            u = self._rng(entropy, i, "drop").random(2)
            if u[0] < self.modality_dropout:
                dropped = "audio" if u[1] < 0.5 else "image"
        corrupted = {"audio", "image"}
        if self.corrupt == "one":
            corrupted = {"audio" if self._rng(entropy, i, "corrupt").random() < 0.5 else "image"}
        if dropped == "audio":
            waveform = waveform.new_zeros(0)
        elif self.audio_snr_db is not None and "audio" in corrupted:
            waveform = add_audio_noise(waveform, self.audio_snr_db, self._rng(entropy, i, "audio_noise"))
        if dropped == "image":
            image = torch.zeros_like(image)
        elif "image" in corrupted:
            if self.image_noise is not None:
                image = add_image_noise(image, self.image_noise, self._rng(entropy, i, "image_noise"))
            if self.image_occlusion is not None:
                image = occlude(image, self.image_occlusion, self._rng(entropy, i, "occlusion"))
        item: dict[str, Tensor | int | bool] = {
            "waveform": waveform,
            "image": image,
            "audio_present": dropped != "audio",
            "image_present": dropped != "image",
            "label": label,
        }
        if self.gate_only is not None:
            item["gate_only"] = self.gate_only
        return item if self.augment is None else self.augment(item, self._rng(entropy, i, "augment"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pairs={len(self)}, images={len(self.images)}, seed={self.seed})"


class ConflictPairs(Dataset):
    r"""Pairs whose two modalities disagree, to train a gated head's gate alone: each item is a recording
    of one digit beside an image of **another** digit, labelled by the image and marked ``gate_only``
    (see :class:`AVDigitsDataModule`'s ``gate_conflicts``).

    A gate that learns only from pairs whose audio is right learns to trust audio; a voice the towers
    never heard is then misread with the gate's full trust. These pairs show the gate a misread voice
    beside a clean image (no corruption, both present): the towers and classifiers learn nothing from
    them (the task detaches all but the gate), so the labels cannot teach the audio tower wrong words.

    Every access draws afresh (item ``i``'s generator from ``seed`` and the access, or at random with
    ``seed=None``): the image's digit, an image of it from ``images`` and a recording of another digit.

    Args:
        clips (AudioClips): the recordings (training split); their labels are the digits.
        images (Tensor): (N, 1, 28, 28) uint8, the image pool.
        image_labels (Tensor): (N,) the digit of each image.
        size (int): items per epoch.
        seed (int, optional): seed of the draws; :obj:`None` draws afresh at every access.
            (default: :obj:`None`)

    Examples:
        >>> import torch
        >>> from attnmm.data import AudioClips
        >>> clips = AudioClips(["a.wav", "b.wav"], [0, 1], 8000)
        >>> ConflictPairs(clips, torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]), 3)
        ConflictPairs(pairs=3, recordings=2, images=4)
    """

    def __init__(self, clips: AudioClips, images: Tensor, image_labels: Tensor, size: int,
                 seed: int | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size is a whole number >= 1 of pairs per epoch, got {size!r}")
        labels = torch.as_tensor(list(clips.labels))
        digits = sorted(set(labels.tolist()) & set(image_labels.tolist()))
        if len(digits) < 2:
            raise ValueError(
                f"conflict pairs need recordings and images of at least two digits in common, got {digits}"
            )
        self.clips, self.images, self.size, self.seed = clips, images, size, seed
        self.digits = digits
        self._images = {d: (image_labels == d).nonzero().flatten() for d in digits}
        self._others = {d: ((labels != d) & torch.isin(labels, torch.tensor(digits))).nonzero().flatten()
                        for d in digits}

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, Tensor | int | bool]:
        entropy = self.seed % 2**63 if self.seed is not None else int(torch.randint(2**62, ()))
        rng = np.random.default_rng([entropy, i, 7])
        digit = self.digits[int(rng.integers(len(self.digits)))]
        pool, others = self._images[digit], self._others[digit]
        image = self.images[int(pool[int(rng.integers(pool.numel()))])].float() / 255.0
        waveform, _ = self.clips[int(others[int(rng.integers(others.numel()))])]
        return {"waveform": waveform, "image": image, "audio_present": True, "image_present": True,
                "label": digit, "gate_only": True}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pairs={self.size}, recordings={len(self.clips)}, images={len(self.images)})"


class _AVDigitsBatchKeys(TypedDict):
    """The keys every :class:`AVDigitsBatch` has."""

    waveform: Tensor
    lengths: Tensor
    image: Tensor
    audio_present: Tensor
    image_present: Tensor
    label: Tensor


class AVDigitsBatch(_AVDigitsBatchKeys, total=False):
    r"""A batch of audio-visual digits: a plain :class:`dict` that both
    :class:`~attnmm.adapters.SpeechAdapter` (``waveform``, ``lengths``) and
    :class:`~attnmm.adapters.ImageAdapter` (``image``) read.

    Shapes:
        - **waveform**: :math:`(B, T)` float32, zero-padded on the right; all zeros for a missing recording.
        - **lengths**: :math:`(B,)` long, real samples per item; 0 for a missing recording.
        - **image**: :math:`(B, 1, 28, 28)` float32 in [0, 1]; all zeros for a missing image.
        - **audio_present**: :math:`(B,)` bool, false where the recording was removed.
        - **image_present**: :math:`(B,)` bool, false where the image was removed.
        - **label**: :math:`(B,)` long, the digit.
        - **gate_only** (only when the items carry it): :math:`(B,)` bool, true for a pair that trains a
          gated head's gate only (an unfamiliar voice, see ``AVDigitsDataModule(gate_voices=...)``).
    """

    gate_only: Tensor


def collate_avdigits(items: Sequence[dict]) -> AVDigitsBatch:
    r"""Stack :class:`AVDigits` items into an :class:`AVDigitsBatch`.

    Examples:
        >>> import torch
        >>> batch = collate_avdigits([
        ...     {"waveform": torch.ones(3), "image": torch.ones(1, 28, 28), "audio_present": True,
        ...      "image_present": True, "label": 4},
        ...     {"waveform": torch.ones(0), "image": torch.zeros(1, 28, 28), "audio_present": False,
        ...      "image_present": True, "label": 2}])
        >>> batch["lengths"], batch["audio_present"], batch["image"].shape
        (tensor([3, 0]), tensor([ True, False]), torch.Size([2, 1, 28, 28]))
    """
    audio = collate_audio([(item["waveform"], item["label"]) for item in items])
    batch: AVDigitsBatch = {
        "waveform": audio["waveform"],
        "lengths": audio["lengths"],
        "image": torch.stack([item["image"] for item in items]),  # (B, 1, 28, 28)
        "audio_present": torch.tensor([bool(item["audio_present"]) for item in items]),
        "image_present": torch.tensor([bool(item["image_present"]) for item in items]),
        "label": audio["label"],
    }
    if any("gate_only" in item for item in items):
        batch["gate_only"] = torch.tensor([bool(item.get("gate_only", False)) for item in items])
    return batch


class AVDigitsDataModule(LightningDataModule):
    r"""Audio-visual digits: every recording of the Free Spoken Digit Dataset paired with an MNIST image
    of the same digit, for multimodal fusion and robustness experiments.

    Both datasets are read from one data folder (``root``, else ``$ATTNMM_DATA``, else
    ``~/.cache/attnmm``): the recordings from ``fsdd/recordings`` by :class:`~attnmm.data.FSDDDataModule`
    and the images from ``MNIST/raw`` by :class:`~attnmm.data.MNISTDataModule`, each split its own way:

    - recordings: the dataset's own split (takes 0-4 of every speaker are the test set) or, with
      ``test_speakers``, all takes of those speakers; validation ``val_fraction`` of the rest per digit,
      or with ``val_speakers`` all other takes of those speakers (voices never trained on);
    - images: the image recipe's split, so the **test images are MNISTDataModule's test set** (the last
      2,000 of the offline 10k test set, or all 10k with the full files) and training and validation
      draw from its training and validation images (``image_val_size`` of them validate).

    Each recording of a split is paired with an image of the same digit from the same split
    (:func:`pair_images`): no recording and no image is in two splits. There is one example per
    recording (``test_pairs_per_recording`` = k: k test pairs per test recording, each with another
    image and its own corruption draws); images are distinct within a split while it has enough of the
    digit. The training and validation pairs are drawn from ``seed``, the test pairs from ``test_seed``
    (a fixed test set whatever the training seed). With ``fresh_train_images`` a training recording
    meets a new image of its digit at every access, drawn from all the training images.

    Corruptions (:class:`AVDigits`: audio noise at ``audio_snr_db``, ``image_noise``, a zeroed square of
    ``image_occlusion`` pixels) apply to every split: drawn afresh in training, the same for each
    validation and test example in every epoch and run. They touch both modalities of every example,
    or with ``corrupt="one"`` one of the two per example (audio or image, equal chance, drawn like the
    corruptions), as when one sensor fails at a time. For a clean model tested on corrupted data,
    test with a second DataModule that differs only in the corruptions: its pairs are the same.
    ``drop_modality`` removes one modality from every **test** example; ``modality_dropout`` removes
    one of the two from a training example with that probability. A removed recording has length 0,
    a removed image is all zeros, and the batch flags them. ``train_corruption`` (a
    :class:`~attnmm.data.RandomCorruption`) corrupts training pairs at random, each modality on its own.

    ``gate_voices`` (a Speech Commands folder, either layout, see :func:`digit_voices`) brings voices the
    model never learns from: its spoken digits (resampled to 8 kHz) join the training pairs
    ``gate_voices_repeats`` times per epoch, each marked ``gate_only``, so that a gated head
    (``SegmentPoolingClassifier(gate=True)``) fits its gate on them while the towers and the classifiers
    learn from FSDD alone (the task detaches everything but the gate for those pairs). The gate thus sees
    how the model's own audio fares on unfamiliar voices, which the training speakers cannot show it.
    ``gate_voices_val`` of its speakers (seeded by ``seed``) stay out of training and form
    :attr:`gate_val_set` (paired with validation images, corrupted like the validation split), a
    validation condition of unfamiliar voices (its pairs, like the validation split's, carry no flag).

    ``gate_conflicts`` adds, per epoch, that share of the training recordings' number of gate-only
    :class:`ConflictPairs`: a training recording beside a clean image of another digit, labelled by the
    image. The gate then meets misread voices beside clean images, which the training speakers, whose
    audio the towers learn to read, never show it (a voice never heard can be misread with confidence;
    the images come from thousands of writers and hold up on new ones).

    Batches are :class:`AVDigitsBatch` dicts: ``waveform`` (B, T), ``lengths`` (B,), ``image``
    (B, 1, 28, 28), ``audio_present`` (B,), ``image_present`` (B,), ``label`` (B,).

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
        self,
        root: str | Path | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        test_speakers: list[str] | None = None,
        val_fraction: float = 0.1,
        image_val_size: int = 1000,
        seed: int = 0,
        test_seed: int = 0,
        audio_snr_db: float | None = None,
        image_occlusion: int | None = None,
        image_noise: float | None = None,
        drop_modality: Modality | None = None,
        modality_dropout: float = 0.0,
        corrupt: Corrupt = "both",
        download: bool = True,
        val_speakers: list[str] | None = None,
        test_pairs_per_recording: int = 1,
        fresh_train_images: bool = False,
        train_corruption: RandomCorruption | None = None,
        gate_voices: str | Path | None = None,
        gate_voices_val: float = 0.5,
        gate_voices_repeats: int = 4,
        gate_conflicts: float = 0.0,
    ) -> None:
        super().__init__()
        if isinstance(gate_conflicts, bool) or not (isinstance(gate_conflicts, (int, float)) and gate_conflicts >= 0):
            raise ValueError(
                f"gate_conflicts is a share >= 0 of the training recordings (conflict pairs per epoch), got "
                f"{gate_conflicts!r}"
            )
        if not (isinstance(gate_voices_val, (int, float)) and 0.0 <= gate_voices_val < 1.0):
            raise ValueError(
                f"gate_voices_val is a share in [0, 1) of the gate voices' speakers, got {gate_voices_val!r}"
            )
        repeats_ok = isinstance(gate_voices_repeats, int) and not isinstance(gate_voices_repeats, bool)
        if not (repeats_ok and gate_voices_repeats >= 1):
            raise ValueError(f"gate_voices_repeats is a whole number >= 1, got {gate_voices_repeats!r}")
        _check_options(audio_snr_db, image_occlusion, image_noise, drop_modality, modality_dropout, corrupt)
        if isinstance(test_pairs_per_recording, bool) or not (
            isinstance(test_pairs_per_recording, int) and test_pairs_per_recording >= 1
        ):
            raise ValueError(f"test_pairs_per_recording is a whole number >= 1, got {test_pairs_per_recording!r}")
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
        folder = Path(self.gate_voices)  # type: ignore[arg-type]
        if not folder.is_absolute() and not folder.exists():
            folder = data_dir(self.root) / folder
        voices = digit_voices(folder)
        speakers = sorted({str(c.speaker) for c in voices})
        order = np.random.default_rng([self.seed, 7]).permutation(len(speakers))
        n_val = math.floor(self.gate_voices_val * len(speakers) + 0.5)
        held = {speakers[k] for k in order[:n_val]}
        if n_val and n_val == len(speakers):
            raise ValueError(
                f"gate_voices_val={self.gate_voices_val} keeps all {len(speakers)} speakers out of training"
            )
        self.gate_speakers = {"train": sorted(set(speakers) - held), "val": sorted(held)}
        clips = {}
        for split, chosen in (("train", False), ("val", True)):
            picked = [c for c in voices if (c.speaker in held) == chosen]
            if picked:  # Speech Commands is 16 kHz: read at the recordings' 8 kHz
                clips[split] = AudioClips(
                    [c.path for c in picked], [CLASS_NAMES.index(c.word) for c in picked], self.sample_rate,
                    cache=True, speakers=[c.speaker for c in picked], file_rate=16000,
                )
        return clips

    def _pairs(self, split: str, clips: AudioClips, gate: bool = False) -> AVDigits:
        images, image_labels = self.mnist.datasets[split].tensors
        seed = 3 * (self.test_seed if split == "test" else self.seed) + _SPLIT_SEED[split] + (1000 if gate else 0)
        repeats = self.test_pairs_per_recording if split == "test" else 1
        train = split == "train"
        return AVDigits(
            clips,
            images,
            pair_images(clips.labels * repeats, image_labels, seed),
            self.audio_snr_db,
            self.image_occlusion,
            self.image_noise,
            drop_modality=self.drop_modality if split == "test" else None,
            modality_dropout=self.modality_dropout if split == "train" else 0.0,
            seed=None if train else seed,
            corrupt=self.corrupt,
            resample_images=self.fresh_train_images and train,
            augment=self.train_corruption if train else None,
            image_labels=image_labels,
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

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

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
