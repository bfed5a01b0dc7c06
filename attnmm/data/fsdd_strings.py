r"""Connected spoken digits: strings of FSDD recordings of one speaker joined by random gaps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnmm.data._audio import AudioClips, collate_audio
from attnmm.data.fsdd import FSDDDataModule, FSDDTake

__all__ = ["DigitStringBatch", "DigitStrings", "FSDDStringsDataModule", "collate_digit_strings", "plan_digit_strings"]

#: Padding value of the target digits (the same as the classification tasks' ignore index).
PAD_DIGIT = -100
#: Per-split offsets of the seed, so that the train and validation draws differ.
_SPLIT_SEED = {"train": 0, "val": 1_000_003, "test": 2_000_003}


@dataclass(frozen=True)
class DigitStringPlan:
    r"""How one string is built: the recordings (indices into the split's takes), and the silences in
    samples before the first, between consecutive recordings, and after the last (``len(takes) + 1``)."""

    takes: tuple[int, ...]
    gaps: tuple[int, ...]


def plan_digit_strings(
    takes: Sequence[FSDDTake], num_strings: int, min_digits: int, max_digits: int, max_gap: int, max_samples: int,
    seed: int, clip_lengths: Sequence[int],
) -> list[DigitStringPlan]:
    r"""Draw ``num_strings`` digit strings from ``takes``, deterministically given ``seed``.

    Each string: a speaker drawn uniformly among those of ``takes``; a length :math:`n` uniform in
    ``[min_digits, max_digits]``; then :math:`n` times a digit uniform among the digits that speaker
    has in ``takes`` and one of its recordings uniformly; silences uniform in ``[0, max_gap]`` samples
    before, between and after them. Digits that would make the string longer than ``max_samples`` are
    dropped from its end (a string keeps at least one digit).

    Args:
        takes (Sequence[FSDDTake]): the recordings of one split.
        num_strings (int): number of strings.
        min_digits (int): fewest digits per string, >= 1.
        max_digits (int): most digits per string, >= ``min_digits``.
        max_gap (int): longest silence in samples.
        max_samples (int): longest string in samples.
        seed (int): seed of the draw.
        clip_lengths (Sequence[int]): samples of each take.
    """
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"need 1 <= min_digits <= max_digits, got min_digits={min_digits}, max_digits={max_digits}")
    if not takes:
        raise ValueError("no recordings to build digit strings from; check the split (test_speakers, val_fraction)")
    by_speaker: dict[str, dict[int, list[int]]] = {}
    for i, t in enumerate(takes):
        by_speaker.setdefault(t.speaker, {}).setdefault(t.digit, []).append(i)
    speakers = sorted(by_speaker)
    g = torch.Generator().manual_seed(seed)

    def draw(n: int) -> int:
        return int(torch.randint(n, (1,), generator=g))

    plans = []
    for _ in range(num_strings):
        pool = by_speaker[speakers[draw(len(speakers))]]
        digits = sorted(pool)
        n = min_digits + draw(max_digits - min_digits + 1)
        chosen = [pool[d][draw(len(pool[d]))] for d in (digits[draw(len(digits))] for _ in range(n))]
        gaps = [draw(max_gap + 1) for _ in range(n + 1)]
        while len(chosen) > 1 and sum(clip_lengths[c] for c in chosen) + sum(gaps) > max_samples:
            chosen.pop()
            gaps.pop(-2)  # the gap after the dropped take; the trailing silence stays
        plans.append(DigitStringPlan(tuple(chosen), tuple(gaps)))
    return plans


class DigitStrings(Dataset):
    r"""Spoken digit strings: recordings of single digits joined by silences, with optional noise.

    Item ``i`` is ``(waveform, digits)``: the concatenation
    :math:`s_0, \mathbf{w}_1, s_1, \ldots, \mathbf{w}_n, s_n` of silences :math:`s_k` and the
    recordings :math:`\mathbf{w}_k` of its plan, plus Gaussian noise of standard deviation
    ``noise_std`` seeded by ``(seed, i)``; ``digits`` is the list of the spoken digits.

    Args:
        clips (AudioClips): the split's recordings (labels are the digits), loaded.
        plans (Sequence[DigitStringPlan]): one plan per string, from :func:`plan_digit_strings`.
        noise_std (float, optional): standard deviation of the added noise. (default: :obj:`0.0`)
        seed (int, optional): seed of the noise. (default: :obj:`0`)
    """

    def __init__(
        self, clips: AudioClips, plans: Sequence[DigitStringPlan], noise_std: float = 0.0, seed: int = 0
    ) -> None:
        if noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {noise_std}")
        self.clips, self.plans = clips, list(plans)
        self.noise_std, self.seed = float(noise_std), seed

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, i: int) -> tuple[Tensor, list[int]]:
        plan = self.plans[i]
        parts = [torch.zeros(plan.gaps[0])]
        digits = []
        for take, gap in zip(plan.takes, plan.gaps[1:], strict=True):
            clip, digit = self.clips[take]
            parts += [clip, torch.zeros(gap)]
            digits.append(digit)
        wave = torch.cat(parts)  # (T,)
        if self.noise_std > 0:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
            wave = wave + self.noise_std * torch.randn(wave.shape, generator=g)
        return wave, digits

    def digit_ends(self, i: int) -> list[int]:
        r"""The sample of string ``i`` at which each digit's recording ends (exclusive), in order.

        With the layout :math:`s_0, \mathbf{w}_1, s_1, \ldots, \mathbf{w}_n, s_n` of
        :meth:`__getitem__`, digit :math:`k` ends at :math:`\sum_{j<k} |s_j| + \sum_{j\le k} |\mathbf{w}_j|`
        samples: the reference time of streaming emission latency
        (:func:`~attnmm.adapters.emission_latency`, in seconds after dividing by the sample rate).
        """
        plan = self.plans[i]
        ends, t = [], plan.gaps[0]
        for take, gap in zip(plan.takes, plan.gaps[1:], strict=True):
            t += len(self.clips[take][0])
            ends.append(t)
            t += gap
        return ends

    def __repr__(self) -> str:
        return f"{type(self).__name__}(strings={len(self)}, recordings={len(self.clips)}, noise_std={self.noise_std})"


class DigitStringBatch(TypedDict):
    r"""A batch of digit strings: a plain :class:`dict` the :class:`~attnmm.adapters.SpeechAdapter` reads.

    Shapes:
        - **waveform**: :math:`(B, T)` float32, zero-padded on the right.
        - **lengths**: :math:`(B,)` long, real samples per item.
        - **targets**: :math:`(B, U)` long, the digits 0-9 of each string, :math:`U` the longest,
          padded with ``-100``.
        - **target_lengths**: :math:`(B,)` long, digits per string.
    """

    waveform: Tensor
    lengths: Tensor
    targets: Tensor
    target_lengths: Tensor


def collate_digit_strings(items: Sequence[tuple[Tensor, Sequence[int]]]) -> DigitStringBatch:
    r"""Stack ``(waveform, digits)`` items into a :class:`DigitStringBatch`.

    Examples:
        >>> import torch
        >>> batch = collate_digit_strings([(torch.ones(3), [4, 2]), (torch.ones(1), [7])])
        >>> batch["targets"], batch["target_lengths"]
        (tensor([[   4,    2],
                [   7, -100]]), tensor([2, 1]))
    """
    audio = collate_audio([(w, 0) for w, _ in items])
    target_lengths = torch.tensor([len(d) for _, d in items], dtype=torch.long)
    targets = torch.full((len(items), max(1, int(target_lengths.max()))), PAD_DIGIT, dtype=torch.long)  # (B, U)
    for b, (_, digits) in enumerate(items):
        targets[b, : len(digits)] = torch.as_tensor(list(digits), dtype=torch.long)
    return {"waveform": audio["waveform"], "lengths": audio["lengths"], "targets": targets,
            "target_lengths": target_lengths}


class FSDDStringsDataModule(FSDDDataModule):
    r"""Connected spoken digits built from the Free Spoken Digit Dataset: strings of 1 to ``max_digits``
    recordings of one speaker, joined by random silences (and optional noise).

    The recordings are split as in :class:`~attnmm.data.FSDDDataModule` (takes 0-4 of every speaker
    are the test set, or all takes of ``test_speakers``; the validation set all takes of
    ``val_speakers`` when given), and every string is built from the
    recordings of one split only, so no test recording is ever heard in training. The strings are drawn
    by :func:`plan_digit_strings`: the training and validation strings from ``seed``, the test strings
    from ``test_seed`` (a fixed test set whatever the training seed). Silences last up to ``max_gap_ms``
    before, between and after the digits; strings are cut to at most ``max_seconds``.

    Batches are :class:`DigitStringBatch` dicts.

    Args:
        root (str or Path, optional): the base data folder holding ``fsdd/``. (default: :obj:`None`)
        batch_size (int, optional): strings per batch. (default: ``16``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        test_speakers (list[str], optional): speakers held out as the test set. (default: :obj:`None`,
            the dataset's own split)
        val_fraction (float, optional): share of the training takes used for validation. (default: ``0.1``)
        seed (int, optional): seed of the validation split and of the training and validation strings.
            (default: ``0``)
        download (bool, optional): download the recordings when missing. (default: :obj:`True`)
        min_digits (int, optional): fewest digits per string. (default: ``1``)
        max_digits (int, optional): most digits per string. (default: ``7``)
        num_train (int, optional): training strings. (default: ``4000``)
        num_val (int, optional): validation strings. (default: ``300``)
        num_test (int, optional): test strings. (default: ``1000``)
        max_gap_ms (float, optional): longest silence around a digit in milliseconds. (default: ``300.0``)
        max_seconds (float, optional): longest string in seconds. (default: ``10.0``)
        noise_std (float, optional): standard deviation of Gaussian noise added to every string
            (samples are in [-1, 1]). (default: ``0.0``)
        test_seed (int, optional): seed of the test strings. (default: ``0``)
        val_speakers (list[str], optional): speakers whose takes alone make the validation strings
            (never trained on); must not overlap ``test_speakers``. (default: :obj:`None`, a
            ``val_fraction`` draw of the training takes)

    Examples:
        >>> dm = FSDDStringsDataModule(root="/data", max_digits=5)
        >>> dm
        FSDDStringsDataModule(root='/data/fsdd', split=own, digits=1-5, batch_size=16)
    """

    collate = staticmethod(collate_digit_strings)

    def __init__(
        self, root: str | Path | None = None, batch_size: int = 16, num_workers: int = 0,
        test_speakers: list[str] | None = None, val_fraction: float = 0.1, seed: int = 0, download: bool = True,
        min_digits: int = 1, max_digits: int = 7, num_train: int = 4000, num_val: int = 300, num_test: int = 1000,
        max_gap_ms: float = 300.0, max_seconds: float = 10.0, noise_std: float = 0.0, test_seed: int = 0,
        val_speakers: list[str] | None = None,
    ) -> None:
        super().__init__(root, batch_size, num_workers, test_speakers, val_fraction, seed, download, val_speakers)
        if not 1 <= min_digits <= max_digits:
            raise ValueError(
                f"need 1 <= min_digits <= max_digits, got min_digits={min_digits}, max_digits={max_digits}"
            )
        if min(num_train, num_val, num_test) < 1:
            raise ValueError(f"num_train, num_val and num_test must be >= 1, got {num_train}, {num_val}, {num_test}")
        if max_gap_ms < 0 or max_seconds <= 0 or noise_std < 0:
            raise ValueError(
                f"need max_gap_ms >= 0, max_seconds > 0 and noise_std >= 0, got {max_gap_ms}, {max_seconds}, "
                f"{noise_std}"
            )
        self.min_digits, self.max_digits = min_digits, max_digits
        self.num_strings = {"train": num_train, "val": num_val, "test": num_test}
        self.max_gap_ms, self.max_seconds, self.noise_std = max_gap_ms, max_seconds, noise_std
        self.test_seed = test_seed

    def _clips(self, split: str) -> DigitStrings:  # type: ignore[override]
        clips = super()._clips(split)
        seed = (self.test_seed if split == "test" else self.seed) + _SPLIT_SEED[split]
        plans = plan_digit_strings(
            self._splits[split], self.num_strings[split], self.min_digits, self.max_digits,
            round(self.max_gap_ms * self.sample_rate / 1000), round(self.max_seconds * self.sample_rate), seed,
            clip_lengths=[len(clips[i][0]) for i in range(len(clips))],
        )
        return DigitStrings(clips, plans, self.noise_std, seed)

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={len(v)}" for k, v in self._splits.items())
        return (
            f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, split={self._split_name()}, "
            f"digits={self.min_digits}-{self.max_digits}, batch_size={self.batch_size}{sizes})"
        )

    def summary(self) -> str:
        r"""A few lines on the data found, the split and the strings."""
        return (
            super().summary().replace("Free Spoken Digit Dataset at", "Digit strings from the FSDD recordings at", 1)
            + f"\n  strings of {self.min_digits}-{self.max_digits} digits of one speaker, silences up to "
            f"{self.max_gap_ms:g} ms, at most {self.max_seconds:g} s, noise std {self.noise_std:g}; "
            + ", ".join(f"{k} {n}" for k, n in self.num_strings.items())
            + f" strings (test seed {self.test_seed})"
        )
