r"""Corruptions of audio-visual pairs: white noise at a set SNR on a recording, Gaussian noise and a zeroed
square on an image, each a function of its input and a random generator; and :class:`RandomCorruption`,
the same corruptions drawn afresh per training item (their kinds, levels and positions)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torchaudio
from torch import Tensor

__all__ = ["RandomCorruption", "add_audio_noise", "add_image_noise", "occlude"]


def add_audio_noise(waveform: Tensor, snr_db: float, rng: np.random.Generator) -> Tensor:
    r"""``waveform`` (T,) plus white Gaussian noise scaled so that the SNR is exactly ``snr_db`` dB,
    :math:`10 \log_{10}(\lVert\mathbf{w}\rVert^2 / \lVert\mathbf{n}\rVert^2)`
    (:func:`torchaudio.functional.add_noise`); an empty waveform is returned as it is.

    Examples:
        >>> import numpy as np, torch
        >>> w = torch.sin(torch.arange(800) / 5.0)
        >>> noisy = add_audio_noise(w, 10.0, np.random.default_rng(0))
        >>> round(float(10 * torch.log10(w.pow(2).sum() / (noisy - w).pow(2).sum())), 3)
        10.0
    """
    if waveform.numel() == 0:
        return waveform
    noise = torch.from_numpy(rng.standard_normal(len(waveform), np.float32))
    return torchaudio.functional.add_noise(waveform, noise, torch.tensor(float(snr_db)))


def add_image_noise(image: Tensor, std: float, rng: np.random.Generator) -> Tensor:
    r"""``image`` (C, H, W) in [0, 1] plus Gaussian noise of standard deviation ``std``, clipped to [0, 1]."""
    noise = torch.from_numpy(rng.standard_normal(image.shape, np.float32))
    return (image + std * noise).clamp_(0.0, 1.0)


def occlude(image: Tensor, side: int, rng: np.random.Generator) -> Tensor:
    r"""``image`` (C, H, W) with a square of ``side`` pixels at a uniformly drawn position set to 0 (in place)."""
    top, left = (int(rng.integers(0, n - side + 1)) for n in image.shape[1:])
    image[:, top : top + side, left : left + side] = 0.0
    return image


def _check_range(name: str, value: Any, low: float, high: float) -> tuple[float, float]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
    )
    if not ok or not low <= value[0] <= value[1] <= high:
        raise ValueError(f"{name} is a range [lowest, highest] within [{low:g}, {high:g}], got {value!r}")
    return float(value[0]), float(value[1])


def _check_p(name: str, p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} is a probability in [0, 1], got {p!r}")
    return float(p)


class RandomCorruption:
    r"""Corrupts a training pair at random, each modality on its own: with probability ``audio_p`` the
    recording gets white noise at an SNR drawn uniformly from ``snr_db`` (dB); with probability
    ``image_p`` the image gets either Gaussian noise of a standard deviation drawn uniformly from
    ``image_noise`` or (with probability ``occlusion_share`` of those) a zeroed square of a side drawn
    uniformly from the integers of ``occlusion``. A modality the item lacks is left as it is.

    A model trained on such pairs sees each modality both clean and damaged, alone or together with a
    damaged other, and so can learn how far to trust each one. Given to
    :class:`~attnmm.data.AVDigitsDataModule` as ``train_corruption``, it touches the training pairs only
    (drawn afresh at every access); the validation and test pairs keep their fixed corruptions.

    Args:
        audio_p (float, optional): probability that the recording is corrupted. (default: ``0.5``)
        snr_db (list[float], optional): the range of the audio SNR in dB. (default: ``[-10, 20]``)
        image_p (float, optional): probability that the image is corrupted. (default: ``0.5``)
        image_noise (list[float], optional): the range of the image noise's standard deviation.
            (default: ``[0.1, 0.8]``)
        occlusion (list[int], optional): the range of the zeroed square's side in pixels.
            (default: ``[6, 20]``)
        occlusion_share (float, optional): share of the corrupted images that are occluded rather than
            noised. (default: ``0.5``)

    Examples:
        >>> import numpy as np, torch
        >>> item = {"waveform": torch.ones(400), "image": torch.ones(1, 28, 28), "audio_present": True,
        ...         "image_present": True, "label": 3}
        >>> out = RandomCorruption(audio_p=1.0, image_p=1.0, occlusion_share=1.0)(item, np.random.default_rng(0))
        >>> bool((out["waveform"] != 1).any()), int((out["image"] == 0).sum()) >= 36, out["label"]
        (True, True, 3)
    """

    def __init__(
        self, audio_p: float = 0.5, snr_db: tuple[float, float] = (-10.0, 20.0), image_p: float = 0.5,
        image_noise: tuple[float, float] = (0.1, 0.8), occlusion: tuple[int, int] = (6, 20),
        occlusion_share: float = 0.5,
    ) -> None:
        self.audio_p, self.image_p = _check_p("audio_p", audio_p), _check_p("image_p", image_p)
        self.occlusion_share = _check_p("occlusion_share", occlusion_share)
        self.snr_db = _check_range("snr_db", snr_db, -math.inf, math.inf)
        self.image_noise = _check_range("image_noise", image_noise, 0.0, math.inf)
        low, high = _check_range("occlusion", occlusion, 1, 28)
        if low != int(low) or high != int(high):
            raise ValueError(f"occlusion is a range of whole pixels, got {occlusion!r}")
        self.occlusion = (int(low), int(high))

    def __call__(self, item: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """A copy of ``item`` (an :class:`~attnmm.data.avdigits.AVDigits` item) corrupted by draws of ``rng``."""
        item = dict(item)
        u = rng.random(3)  # audio?, image?, occlusion or noise?
        if item["audio_present"] and u[0] < self.audio_p:
            item["waveform"] = add_audio_noise(item["waveform"], float(rng.uniform(*self.snr_db)), rng)
        if item["image_present"] and u[1] < self.image_p:
            image = item["image"].clone()
            if u[2] < self.occlusion_share:
                item["image"] = occlude(image, int(rng.integers(self.occlusion[0], self.occlusion[1] + 1)), rng)
            else:
                item["image"] = add_image_noise(image, float(rng.uniform(*self.image_noise)), rng)
        return item

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(audio_p={self.audio_p:g}, snr_db={list(self.snr_db)}, image_p={self.image_p:g}, "
            f"image_noise={list(self.image_noise)}, occlusion={list(self.occlusion)}, "
            f"occlusion_share={self.occlusion_share:g})"
        )
