r"""The pairs of the audio-visual digits: a spoken digit and an image of the same digit, corrupted, dropped or
conflicting as a study asks, deterministically per item, and their batches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, TypedDict, get_args

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnmm.data._audio import AudioClips, collate_audio
from attnmm.data.corruptions import RandomCorruption, add_audio_noise, add_image_noise, occlude
from attnmm.data.mnist import MNISTDataModule

__all__ = ["AVDigits", "AVDigitsBatch", "ConflictPairs", "Corrupt", "Modality", "collate_avdigits", "pair_images"]

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
    audio_snr_db: float | None, image_occlusion: int | None, image_noise: float | None, drop_modality: str | None,
    modality_dropout: float, corrupt: str = "both",
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


def _check_counts(
    gate_conflicts: float, gate_voices_val: float, gate_voices_repeats: int, test_pairs_per_recording: int
) -> None:
    if isinstance(gate_conflicts, bool) or not (isinstance(gate_conflicts, (int, float)) and gate_conflicts >= 0):
        raise ValueError(
            f"gate_conflicts is a share >= 0 of the training recordings (conflict pairs per epoch), got "
            f"{gate_conflicts!r}"
        )
    if not (isinstance(gate_voices_val, (int, float)) and 0.0 <= gate_voices_val < 1.0):
        raise ValueError(f"gate_voices_val is a share in [0, 1) of the gate voices' speakers, got {gate_voices_val!r}")
    for name, value in (("gate_voices_repeats", gate_voices_repeats),
                        ("test_pairs_per_recording", test_pairs_per_recording)):
        if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} is a whole number >= 1, got {value!r}")


class AVDigits(Dataset):
    r"""Pairs of a spoken digit and an image of the same digit, optionally corrupted or missing a modality.

    Item ``i`` is the recording ``clips[i]`` and the image ``images[pairs[i]]`` (uint8, scaled to [0, 1]),
    a dict with ``waveform`` (T,), ``image`` (1, 28, 28), ``audio_present``, ``image_present`` and
    ``label``; batch items with :func:`collate_avdigits`. The corruptions, when set, are
    :func:`~attnmm.data.corruptions.add_audio_noise` (at exactly ``audio_snr_db`` dB),
    :func:`~attnmm.data.corruptions.add_image_noise` (std ``image_noise``) and then
    :func:`~attnmm.data.corruptions.occlude` (a square of ``image_occlusion`` pixels).
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
        self, clips: AudioClips, images: Tensor, pairs: Sequence[int], audio_snr_db: float | None = None,
        image_occlusion: int | None = None, image_noise: float | None = None, drop_modality: Modality | None = None,
        modality_dropout: float = 0.0, seed: int | None = 0, corrupt: Corrupt = "both", resample_images: bool = False,
        augment: RandomCorruption | None = None, image_labels: Tensor | None = None, gate_only: bool | None = None,
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
            self._by_digit = {d: (image_labels == d).nonzero().flatten() for d in sorted(set(self.clips.labels))}
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
