r"""Shared plumbing of the speech DataModules: reading WAV files, a clip dataset, and batching."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import soundfile
import torch
import torchaudio
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from attnmm.data._resumable import ResumableDataLoader, SplitLoaders

__all__ = ["AudioBatch", "AudioClips", "collate_audio", "read_audio"]


def read_audio(path: str | Path, sample_rate: int | None = None, start: int = 0, stop: int | None = None) -> np.ndarray:
    r"""Read a mono audio file as float32 samples in :math:`[-1, 1]` with :mod:`soundfile`.

    Multi-channel files are averaged to mono.

    Args:
        path (str or Path): the audio file (WAV, FLAC, ...).
        sample_rate (int, optional): the rate the file must have; a file with another rate is an
            error (nothing is resampled). (default: :obj:`None`, any rate)
        start (int, optional): the first sample to read. (default: ``0``)
        stop (int, optional): the sample to stop before; :obj:`None` is the end of the file.
            (default: :obj:`None`)

    Returns:
        numpy.ndarray: the samples, shape ``(T,)``, dtype float32.

    Raises:
        RuntimeError: the file is missing, corrupt, truncated (a WAV file holding fewer samples than
            its header declares) or not audio; the message names the file.
        ValueError: the file's sample rate is not ``sample_rate``.
    """
    fix = "replace it with an intact copy from the dataset's release, or delete it"
    try:
        samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True, start=start, stop=stop)
    except Exception as err:  # soundfile raises LibsndfileError, TypeError or OSError depending on the fault
        raise RuntimeError(f"could not read audio file {path}: {err}. The file is corrupt or not audio; {fix}") from err
    truncated = _wav_truncation(path)
    if truncated is not None:  # libsndfile reads what is there and says nothing
        declared, present = truncated
        raise RuntimeError(
            f"audio file {path} is truncated: its WAV header declares {declared} bytes of samples but only "
            f"{present} follow (an interrupted copy or download); {fix}"
        )
    if sample_rate is not None and rate != sample_rate:
        raise ValueError(
            f"audio file {path} has sample rate {rate} Hz, expected {sample_rate} Hz; "
            "use the dataset's original files (nothing is resampled here)"
        )
    mono = samples[:, 0] if samples.shape[1] == 1 else samples.mean(axis=1)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _wav_truncation(path: str | Path) -> tuple[int, int] | None:
    """``(declared, present)`` sizes of the ``data`` chunk of a RIFF/WAVE file that holds fewer bytes than
    its header declares, else ``None`` (also for other formats and for streamed WAVs of unknown size)."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:] != b"WAVE":
            return None
        size = os.fstat(f.fileno()).st_size
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            chunk = f.read(8)
            declared = int.from_bytes(chunk[4:], "little")
            if chunk[:4] == b"data":
                present = size - pos - 8
                unknown = declared in (0, 0xFFFFFFFF)  # written by streaming encoders
                return (declared, present) if not unknown and present < declared else None
            pos += 8 + declared + (declared & 1)  # chunks are padded to an even size
    return None


class AudioClips(Dataset):
    r"""Labelled audio clips read from files, optionally kept in memory after the first read.

    Items are ``(waveform, label)`` with ``waveform`` a float32 tensor of shape ``(T,)``; batch them
    with :func:`collate_audio`. With ``cache=True`` decoded clips are kept, and :meth:`load` reads all
    of them at once (call it in ``setup``, before worker processes are forked, so they share it).

    Args:
        paths (Sequence[Path]): the audio files.
        labels (Sequence[int]): the class index of each file.
        sample_rate (int): the rate every file must have.
        cache (bool, optional): keep decoded clips in memory. (default: :obj:`False`)
        speakers (Sequence[str or None], optional): the speaker of each clip, :obj:`None` for a clip
            without one (background noise); :attr:`num_speakers` counts them. (default: :obj:`None`,
            not known)
        spans (Sequence[tuple[int, int] or None], optional): the samples ``[start, stop)`` of each file
            that make its clip, :obj:`None` for the whole file. (default: :obj:`None`, whole files)
        file_rate (int, optional): the rate every file has, when it is not ``sample_rate``: each clip
            is then resampled from ``file_rate`` to ``sample_rate`` Hz when read
            (:func:`torchaudio.functional.resample`; ``spans`` count samples of the files). (default:
            :obj:`None`, the files are at ``sample_rate``)

    Examples:
        >>> clips = AudioClips([], [], sample_rate=8000)
        >>> len(clips)
        0
        >>> AudioClips(["a.wav", "b.wav", "c.wav"], [0, 1, 1], 16000, speakers=["ann", "bob", None])
        AudioClips(clips=3, speakers=2, sample_rate=16000)
        >>> AudioClips(["a.wav"], [0], 8000, file_rate=16000)  # read at 16 kHz, resampled to 8 kHz
        AudioClips(clips=1, sample_rate=8000, file_rate=16000)
    """

    def __init__(
        self, paths: Sequence[Path], labels: Sequence[int], sample_rate: int, cache: bool = False,
        speakers: Sequence[str | None] | None = None, spans: Sequence[tuple[int, int] | None] | None = None,
        file_rate: int | None = None,
    ) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"got {len(paths)} paths but {len(labels)} labels; pass one label per file")
        for name, values in (("speakers", speakers), ("spans", spans)):
            if values is not None and len(values) != len(paths):
                raise ValueError(f"got {len(paths)} paths but {len(values)} {name}; pass one per file (or None)")
        self.paths = list(paths)
        self.labels = [int(y) for y in labels]
        self.sample_rate = sample_rate
        self.cache = cache
        self.speakers = None if speakers is None else list(speakers)
        self.spans = None if spans is None else list(spans)
        if file_rate is not None and file_rate < 1:
            raise ValueError(f"file_rate is the files' rate in Hz (>= 1), or None for sample_rate; got {file_rate}")
        self.file_rate = sample_rate if file_rate is None else int(file_rate)
        self._clips: list[Tensor | None] = [None] * len(self.paths)

    @property
    def num_speakers(self) -> int | None:
        r"""The number of distinct speakers (clips without one do not count); :obj:`None` when not known."""
        return None if self.speakers is None else len({s for s in self.speakers if s is not None})

    def load(self) -> AudioClips:
        r"""Decode every clip now (requires ``cache=True``); returns ``self``."""
        if not self.cache:
            raise RuntimeError("AudioClips.load() keeps clips in memory; construct with cache=True to use it")
        for i in range(len(self)):
            self._clip(i)
        return self

    def _clip(self, i: int) -> Tensor:
        clip = self._clips[i]
        if clip is None:
            span = None if self.spans is None else self.spans[i]
            start, stop = (0, None) if span is None else span
            clip = torch.from_numpy(read_audio(self.paths[i], self.file_rate, start, stop))
            if self.file_rate != self.sample_rate:
                clip = torchaudio.functional.resample(clip, self.file_rate, self.sample_rate)
            if self.cache:
                self._clips[i] = clip
        return clip

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self._clip(i), self.labels[i]

    def __repr__(self) -> str:
        speakers = "" if self.speakers is None else f", speakers={self.num_speakers}"
        rate = "" if self.file_rate == self.sample_rate else f", file_rate={self.file_rate}"
        return f"{type(self).__name__}(clips={len(self)}{speakers}, sample_rate={self.sample_rate}{rate})"


class AudioBatch(TypedDict):
    r"""A batch of variable-length clips, zero-padded on the right: a plain :class:`dict` with three keys.

    Shapes:
        - **waveform**: :math:`(B, T)` float32, :math:`T` the longest clip's length, zeros after each
          clip's end.
        - **lengths**: :math:`(B,)` long, the number of real samples of each clip.
        - **label**: :math:`(B,)` long, the class indices.
    """

    waveform: Tensor
    lengths: Tensor
    label: Tensor


def collate_audio(items: Sequence[tuple[Tensor, int]]) -> AudioBatch:
    r"""Stack ``(waveform, label)`` items into an :class:`AudioBatch`, zero-padding to the longest clip.

    Args:
        items (Sequence[tuple[Tensor, int]]): clips of shape ``(T_b,)`` and their labels.

    Examples:
        >>> import torch
        >>> batch = collate_audio([(torch.ones(3), 1), (torch.ones(1), 7)])
        >>> batch["waveform"]
        tensor([[1., 1., 1.],
                [1., 0., 0.]])
        >>> batch["lengths"], batch["label"]
        (tensor([3, 1]), tensor([1, 7]))
    """
    if len(items) == 0:
        raise ValueError("collate_audio got an empty list of items; a batch needs at least one clip")
    clips = [torch.as_tensor(w, dtype=torch.float32) for w, _ in items]
    for b, clip in enumerate(clips):
        if clip.dim() != 1:
            raise ValueError(f"item {b} has a waveform of shape {tuple(clip.shape)}; expected a mono clip (T,)")
    lengths = torch.tensor([clip.shape[0] for clip in clips], dtype=torch.long)
    waveform = nn.utils.rnn.pad_sequence(clips, batch_first=True)  # (B, T), zeros after each clip
    label = torch.tensor([int(y) for _, y in items], dtype=torch.long)
    return {"waveform": waveform, "lengths": lengths, "label": label}


def _augmented_collate(augment: nn.Module, items: Sequence[tuple[Tensor, int]]) -> AudioBatch:
    """:func:`collate_audio`, then ``augment(waveform, lengths)`` on the padded batch."""
    batch = collate_audio(items)
    with torch.no_grad():
        batch["waveform"], batch["lengths"] = augment(batch["waveform"], batch["lengths"])
    return batch


class AudioDataModule(SplitLoaders):
    """Base of the audio DataModules: the train/val/test loaders of :class:`AudioBatch` over the sets
    a subclass's ``setup`` fills (``train_set``, ``val_set``, ``test_set``), batched by ``collate``.
    ``train_augment`` (a module ``(waveform, lengths) -> (waveform, lengths)``), when a subclass sets it, is
    applied to the padded training batches only."""

    batch_size: int
    num_workers: int
    train_set: AudioClips | None = None
    val_set: AudioClips | None = None
    test_set: AudioClips | None = None
    train_augment: nn.Module | None = None
    collate: Callable[[Sequence], Any] = staticmethod(collate_audio)

    def _loader(self, split: str, train: bool, dataset: Dataset | None = None) -> DataLoader:
        """The loader of ``dataset`` (default: the split's set, ``None`` until ``setup`` made it)."""
        dataset = getattr(self, f"{split}_set") if dataset is None else dataset
        if dataset is None:
            stage = "test" if split == "test" else "fit"
            raise RuntimeError(f"the {split} set is not loaded; call dm.setup('{stage}') first")
        augment = self.train_augment if train else None
        if augment is not None:
            augment.train()
        return (ResumableDataLoader if train else DataLoader)(
            dataset, batch_size=self.batch_size, shuffle=train, num_workers=self.num_workers,
            collate_fn=self.collate if augment is None else partial(_augmented_collate, augment),
            persistent_workers=self.num_workers > 0,
        )


def word_clips(clips: Sequence, words: Sequence[str], sample_rate: int, file_rate: int = 16000) -> AudioClips:
    """Speech Commands clips (``path``, ``word``, ``speaker``) as :class:`AudioClips` labelled by the
    index of their word in ``words``, read at ``sample_rate`` from the files' ``file_rate`` (kept once read)."""
    return AudioClips(
        [c.path for c in clips], [list(words).index(c.word) for c in clips], sample_rate, cache=True,
        speakers=[c.speaker for c in clips], file_rate=file_rate,
    )
