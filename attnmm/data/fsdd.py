r"""The Free Spoken Digit Dataset (FSDD): spoken digits 0-9, WAV PCM16 mono at 8 kHz."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path, PurePosixPath

from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import ConcatDataset, DataLoader

from attnmm.data._audio import AudioClips, AudioDataModule, word_clips
from attnmm.data._root import DATA_ENV, new_folder, resolve_root, under_data
from attnmm.data._scan import DIGIT_WORDS, FILE_RATE, FSDD_FILE_NAME, OWN_TEST_TAKES, FSDDTake, digit_voices, scan_fsdd
from attnmm.data._speakers import check_disjoint, read_speakers, split_fsdd

FSDD_URL = "https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/tags/v1.0.10.tar.gz"
CLASS_NAMES = DIGIT_WORDS

__all__ = ["CLASS_NAMES", "FSDDDataModule", "FSDDTake", "FSDD_URL", "download_fsdd", "scan_fsdd", "split_fsdd"]


def download_fsdd(dataset_dir: str | Path, url: str = FSDD_URL, timeout: float = 60.0) -> Path:
    r"""Download the FSDD release archive and extract its recordings to ``<dataset_dir>/recordings``.

    The archive is fetched into a temporary folder inside ``dataset_dir``; only the ``recordings/*.wav``
    members are written, into a staging folder that is renamed into place when complete.

    Args:
        dataset_dir (str or Path): the dataset folder, e.g. ``~/.cache/attnmm/fsdd``.
        url (str, optional): the release archive (a ``.tar.gz``). (default: the v1.0.10 tag on GitHub)
        timeout (float, optional): seconds to wait for the server. (default: ``60.0``)

    Returns:
        Path: the ``recordings`` folder.
    """
    target = Path(dataset_dir).expanduser() / "recordings"
    # a failed download removes the folders it made (no empty fsdd/ is left to puzzle over)
    with new_folder(target.parent), tempfile.TemporaryDirectory(prefix=".fsdd-download-", dir=target.parent) as tmp:
        archive, staged = Path(tmp, "fsdd.tar.gz"), Path(tmp, "recordings")
        with urllib.request.urlopen(url, timeout=timeout) as response, open(archive, "wb") as out:
            shutil.copyfileobj(response, out)
        staged.mkdir()
        count = 0
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                # only <top folder>/recordings/<take>.wav, written by base name: no archive path reaches the disk
                top, *parts = PurePosixPath(member.name).parts or ("",)
                if (
                    member.isfile()
                    and top not in ("", ".", "..", "/")
                    and len(parts) == 2
                    and parts[0] == "recordings"
                    and FSDD_FILE_NAME.match(parts[1])
                ):
                    source = tar.extractfile(member)
                    assert source is not None  # a regular file always has contents
                    with source, open(staged / parts[1], "wb") as out:
                        shutil.copyfileobj(source, out)
                    count += 1
        if count == 0:
            raise RuntimeError(f"the archive at {url} holds no recordings/*.wav files")
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        os.rename(staged, target)
    return target


class FSDDDataModule(AudioDataModule):
    r"""The Free Spoken Digit Dataset (Jakobovski et al.): 10 spoken digits, 8 kHz mono WAV.

    Recordings ``{digit}_{speaker}_{index}.wav`` are read from ``<root>/fsdd/recordings``
    (:func:`~attnmm.data.resolve_root`) and decoded into memory in :meth:`setup`; the label is the digit,
    and batches are :class:`~attnmm.data.AudioBatch` dicts. The splits are :func:`split_fsdd`'s; speakers
    are named by a list or by the path of a text file with one id per line (blank lines and ``#``
    comments ignored; read in :meth:`setup`).

    ``extra_voices`` (a Speech Commands folder, see :func:`~attnmm.data.speech_commands.digit_voices`)
    adds the digits its many speakers say, at 8 kHz, to the training batches only (FSDD's five voices
    are learnt along with the digits); validation and test stay FSDD's, and :attr:`voices_set` holds them.

    Args:
        root (str or Path, optional): the base data folder holding ``fsdd/``. (default: :obj:`None`)
        batch_size (int, optional): clips per batch. (default: ``32``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        test_speakers (list[str] or str, optional): speakers held out as the test set, e.g. ``["theo"]``,
            or the path of a text file of ids, one per line. (default: :obj:`None`, the dataset's own split)
        val_fraction (float, optional): share of the training takes used for validation. (default: ``0.1``)
        seed (int, optional): seed of the validation split. (default: ``0``)
        download (bool, optional): download the release archive from GitHub when the recordings are
            missing. (default: :obj:`True`)
        val_speakers (list[str] or str, optional): speakers held out as the validation set (all their takes
            outside the test set, never trained on), e.g. ``["lucas"]`` or a file as for ``test_speakers``,
            so that checkpoints and settings are chosen on unseen voices; must not overlap
            ``test_speakers``; replaces the ``val_fraction`` draw. (default: :obj:`None`)
        extra_voices (str or Path, optional): a Speech Commands folder whose spoken digits join the
            training batches; a relative path that does not exist is taken under the data folder (e.g.
            ``speech_commands_test_v0.02``). (default: :obj:`None`)
        extra_voices_repeats (int, optional): times each of its clips is seen per epoch. (default: ``1``)
        require_extra_voices (bool, optional): a missing ``extra_voices`` folder is an error; with
            :obj:`False` it is a warning and training uses FSDD's voices alone (the default config, so that
            it runs where only FSDD is). (default: :obj:`True`)

    Examples:
        >>> dm = FSDDDataModule(root="/data", test_speakers=["theo"])
        >>> dm
        FSDDDataModule(root='/data/fsdd', split=test_speakers=['theo'], batch_size=32)
        >>> dm.sample_rate, dm.num_classes
        (8000, 10)
    """

    sample_rate: int = 8000
    num_classes: int = len(CLASS_NAMES)
    class_names: tuple[str, ...] = CLASS_NAMES

    def __init__(
        self, root: str | Path | None = None, batch_size: int = 32, num_workers: int = 0,
        test_speakers: list[str] | str | None = None, val_fraction: float = 0.1, seed: int = 0, download: bool = True,
        val_speakers: list[str] | str | None = None, extra_voices: str | Path | None = None,
        extra_voices_repeats: int = 1, require_extra_voices: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(extra_voices_repeats, bool) or not isinstance(extra_voices_repeats, int) \
                or extra_voices_repeats < 1:
            raise ValueError(f"extra_voices_repeats is a whole number >= 1, got {extra_voices_repeats!r}")
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"need batch_size >= 1 and num_workers >= 0, got {batch_size} and {num_workers}")
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if isinstance(test_speakers, (list, tuple)) and len(test_speakers) == 0:
            raise ValueError("test_speakers is empty; pass None for the dataset's own split, or name speakers")
        if isinstance(val_speakers, (list, tuple)) and len(val_speakers) == 0:
            raise ValueError("val_speakers is empty; pass None for a val_fraction draw of the training takes")
        self.root, self.batch_size, self.num_workers = root, batch_size, num_workers
        # a list is kept as a list; a file is read in setup
        self.test_speakers = list(test_speakers) if isinstance(test_speakers, (list, tuple)) else test_speakers
        self.val_speakers = list(val_speakers) if isinstance(val_speakers, (list, tuple)) else val_speakers
        if isinstance(self.test_speakers, list) and isinstance(self.val_speakers, list):
            check_disjoint(self.test_speakers, self.val_speakers)
        self._held_out: dict[str, list[str] | None] = {}
        self.val_fraction, self.seed, self.download = val_fraction, seed, download
        self._takes: list[FSDDTake] | None = None
        self._splits: dict[str, list[FSDDTake]] = {}
        self.train_set = self.val_set = self.test_set = None
        self.extra_voices, self.extra_voices_repeats = extra_voices, extra_voices_repeats
        self.require_extra_voices = require_extra_voices
        self._voices_read = False
        #: The digits of ``extra_voices`` at 8 kHz (after ``setup("fit")``), else :obj:`None`.
        self.voices_set: AudioClips | None = None

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/fsdd``."""
        return resolve_root(self.root, "fsdd")

    def _recordings(self) -> Path:
        recordings = self.dataset_dir / "recordings"
        if recordings.is_dir() and any(recordings.glob("*.wav")):
            return recordings
        reason, cause = "download=False", None
        if self.download:
            try:
                return download_fsdd(self.dataset_dir)
            except Exception as err:  # no network, server error, bad archive: all end in the same advice
                reason, cause = f"downloading {FSDD_URL} failed: {err}", err
        raise FileNotFoundError(
            f"Free Spoken Digit Dataset not found: no WAV files in {recordings} ({reason}). "
            f"Put the recordings at {recordings}/*.wav (files {{digit}}_{{speaker}}_{{index}}.wav from the "
            "recordings/ folder of https://github.com/Jakobovski/free-spoken-digit-dataset, tag v1.0.10), "
            f"or point root= or the {DATA_ENV} environment variable at a folder that holds fsdd/recordings/ "
            f"(e.g. export {DATA_ENV}=/path/to/data)."
        ) from cause

    def prepare_data(self) -> None:
        self._recordings()

    def setup(self, stage: str | None = None) -> None:
        if self._takes is None:
            test_ids = read_speakers(self.test_speakers, "test_speakers")
            val_ids = read_speakers(self.val_speakers, "val_speakers")
            check_disjoint(test_ids, val_ids)
            takes = scan_fsdd(self._recordings())
            train, val, test = split_fsdd(takes, test_ids, self.val_fraction, self.seed, val_ids)
            self._takes, self._held_out = takes, {"test": test_ids, "val": val_ids}
            self._splits = {"train": train, "val": val, "test": test}
        if stage in (None, "fit", "validate") and self.train_set is None:
            self.train_set, self.val_set = self._clips("train"), self._clips("val")
        if stage in (None, "fit") and self.extra_voices is not None and not self._voices_read:
            self.voices_set, self._voices_read = self._read_voices(), True
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self._clips("test")

    def _voices_dir(self) -> Path:
        return under_data(self.root, self.extra_voices)  # type: ignore[arg-type]

    def _read_voices(self) -> AudioClips | None:
        folder = self._voices_dir()
        if not folder.is_dir() and not self.require_extra_voices:
            rank_zero_warn(
                f"extra_voices: no Speech Commands folder at {folder}; training on FSDD's voices alone, which "
                "recognises new voices less well (put the folder there, or set extra_voices to its path)"
            )
            return None
        voices = digit_voices(folder)  # Speech Commands is 16 kHz: read at FSDD's 8 kHz
        return word_clips(voices, CLASS_NAMES, self.sample_rate, FILE_RATE).load()

    def train_dataloader(self) -> DataLoader:
        if self.voices_set is None or self.train_set is None:
            return super().train_dataloader()
        voices = [self.voices_set] * self.extra_voices_repeats
        return self._loader("train", True, ConcatDataset([self.train_set, *voices]))

    def _clips(self, split: str) -> AudioClips:
        takes = self._splits[split]
        paths, digits, speakers = [t.path for t in takes], [t.digit for t in takes], [t.speaker for t in takes]
        return AudioClips(paths, digits, self.sample_rate, cache=True, speakers=speakers).load()

    @property
    def speakers(self) -> list[str]:
        r"""The speakers found in the recordings (after :meth:`setup`)."""
        if self._takes is None:
            raise RuntimeError("speakers are known after setup(); call dm.setup() first")
        return sorted({t.speaker for t in self._takes})

    def _split_name(self) -> str:
        name = "own" if self.test_speakers is None else f"test_speakers={self.test_speakers!r}"
        return name if self.val_speakers is None else f"{name}, val_speakers={self.val_speakers!r}"

    def _named(self, split: str) -> str:
        """The held-out speakers of ``split`` (test or val) for the summary; a file's ids after setup."""
        given = self.test_speakers if split == "test" else self.val_speakers
        ids = self._held_out.get(split)
        if ids is None:
            return ", ".join(given) if isinstance(given, list) else f"the speakers listed in {given}"
        return ", ".join(ids) + ("" if isinstance(given, list) else f" (from {given})")

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={len(v)}" for k, v in self._splits.items())
        return (
            f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, split={self._split_name()}, "
            f"batch_size={self.batch_size}{sizes})"
        )

    def summary(self) -> str:
        r"""A few lines on the data found and the split (complete after :meth:`setup`)."""
        rule = (
            f"takes 0-{OWN_TEST_TAKES - 1} of every speaker are the test set (the dataset's own split)"
            if self.test_speakers is None
            else f"all takes of {self._named('test')} are the test set"
        )
        lines = [
            f"Free Spoken Digit Dataset at {self.dataset_dir / 'recordings'}",
            f"  {self.sample_rate} Hz mono, {self.num_classes} classes (digits 0-9)",
            f"  split: {rule}; "
            + (
                f"validation {self.val_fraction:.0%} of training takes per digit, seed {self.seed}"
                if self.val_speakers is None
                else f"all takes of {self._named('val')} are the validation set"
            ),
        ]
        if self._takes is not None:
            lines.insert(2, f"  {len(self._takes)} recordings, speakers: {', '.join(self.speakers)}")
            lines.append("  " + ", ".join(f"{k} {len(v)}" for k, v in self._splits.items()))
        if self.extra_voices is not None:
            if self.voices_set is not None:
                found = f": {len(self.voices_set)} clips of {self.voices_set.num_speakers} speakers"
            else:
                found = " (not found: FSDD's voices alone)" if self._voices_read else ""
            lines.append(f"  extra training voices, the digits of {self._voices_dir()}{found}, "
                         f"{self.extra_voices_repeats}x per epoch")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
