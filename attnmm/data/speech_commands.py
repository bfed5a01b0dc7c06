r"""Google Speech Commands v0.02: one-second spoken commands, 16 kHz mono WAV."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from attnmm.data._audio import AudioClips, AudioDataModule
from attnmm.data._root import DATA_ENV, resolve_root

# Folder names as torchaudio's SPEECHCOMMANDS lays the data out: <root>/SpeechCommands/speech_commands_v0.02
FOLDER_IN_ARCHIVE = "SpeechCommands"
VERSION = "speech_commands_v0.02"
ARCHIVE_URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
BACKGROUND_FOLDER = "_background_noise_"
UNKNOWN = "_unknown_"
CORE_COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
_LISTS = {"val": "validation_list.txt", "test": "testing_list.txt"}

__all__ = [
    "CORE_COMMANDS",
    "SpeechCommandsDataModule",
    "UNKNOWN",
    "download_speech_commands",
    "scan_speech_commands",
]


def scan_speech_commands(version_dir: str | Path) -> dict[str, list[tuple[str, str]]]:
    r"""The clips of each split as ``(relative path, word)`` pairs, sorted by path.

    ``val`` and ``test`` are the clips named in ``validation_list.txt`` and ``testing_list.txt``;
    ``train`` is every other ``<word>/*.wav``. ``_background_noise_`` (long noise recordings, not
    utterances) and hidden folders are skipped.

    Args:
        version_dir (str or Path): the ``speech_commands_v0.02`` folder.
    """
    version_dir = Path(version_dir)
    listed: dict[str, str] = {}
    for split, list_name in _LISTS.items():
        for line in (version_dir / list_name).read_text().splitlines():
            if line.strip():
                listed[Path(line.strip()).as_posix()] = split
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "val": [], "test": []}
    for word_dir in sorted(version_dir.iterdir()):
        if not word_dir.is_dir() or word_dir.name == BACKGROUND_FOLDER or word_dir.name.startswith("."):
            continue
        for clip in sorted(word_dir.glob("*.wav")):
            rel = f"{word_dir.name}/{clip.name}"
            splits[listed.get(rel, "train")].append((rel, word_dir.name))
    return splits


def download_speech_commands(base: str | Path) -> None:
    r"""Download and extract Speech Commands v0.02 (2.3 GB) into ``<base>/SpeechCommands`` with torchaudio.

    torchaudio extracts in place, and takes any existing folder for a complete one; here it works in a
    staging folder inside ``<base>`` whose extracted tree is renamed into place only when complete, so an
    interrupted download or extraction leaves no partial dataset behind. The archive is kept as
    ``<base>/speech_commands_v0.02.tar.gz`` (torchaudio's place for it) and re-used by a retry.

    Raises:
        FileExistsError: ``<base>/SpeechCommands/speech_commands_v0.02`` exists but is incomplete
            (left by an interrupted extraction outside this function): delete it and run again.
    """
    from torchaudio.datasets import SPEECHCOMMANDS  # only its downloader is used; it loads no audio here

    base = Path(base).expanduser()
    target = base / FOLDER_IN_ARCHIVE / VERSION
    if target.exists():
        raise FileExistsError(
            f"{target} exists but lacks validation_list.txt or testing_list.txt: an incomplete extraction. "
            "Delete it and run again (a downloaded archive next to it is re-used)"
        )
    archive = base / f"{VERSION}.tar.gz"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".speech-commands-", dir=base) as tmp:
        staged_archive = Path(tmp, archive.name)
        if archive.is_file():
            try:
                os.link(archive, staged_archive)  # a second name: a kill now leaves the archive in place
            except OSError:
                os.replace(archive, staged_archive)
        try:
            SPEECHCOMMANDS(tmp, url=VERSION, folder_in_archive=FOLDER_IN_ARCHIVE, download=True)
        finally:
            if staged_archive.is_file():  # keep a complete download for a retry
                os.replace(staged_archive, archive)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(Path(tmp, FOLDER_IN_ARCHIVE, VERSION), target)


class SpeechCommandsDataModule(AudioDataModule):
    r"""Google Speech Commands v0.02 (Warden, 2018): keyword spotting on one-second 16 kHz clips.

    Data is read from ``<root>/SpeechCommands/speech_commands_v0.02/<word>/<clip>.wav``, the layout of
    torchaudio's ``SPEECHCOMMANDS``, ``root`` resolved by :func:`~attnmm.data.resolve_root`. The splits are
    the dataset's own: ``validation_list.txt``, ``testing_list.txt``, and all other clips for training
    (:func:`scan_speech_commands`). Clips are read with :mod:`soundfile` when a batch needs them (the
    dataset is too large to keep in memory) and are not padded to one second: batches are padded to their
    longest clip.

    Classes: ``labels`` (default: the ten core commands yes, no, up, down, left, right, on, off, stop,
    go), in that order. Clips of other words are dropped, or with ``include_unknown=True`` form one last
    class ``_unknown_`` (it is then much the largest class). There is no silence class. In YAML configs
    quote the words: unquoted ``yes``, ``no``, ``on`` and ``off`` are read as booleans.

    Batches are :class:`~attnmm.data.AudioBatch` dicts: ``waveform`` (B, T) zero-padded, ``lengths`` (B,),
    ``label`` (B,); :attr:`sample_rate` is 16000.

    Args:
        root (str or Path, optional): the base data folder holding ``SpeechCommands/``. (default: :obj:`None`)
        batch_size (int, optional): clips per batch. (default: ``64``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        labels (list[str], optional): the words to classify. (default: :obj:`None`, the ten core commands)
        include_unknown (bool, optional): map all other words to a final ``_unknown_`` class instead of
            dropping them. (default: :obj:`False`)
        download (bool, optional): download the 2.3 GB archive with torchaudio when the data is missing.
            (default: :obj:`False`)

    Examples:
        >>> dm = SpeechCommandsDataModule(root="/data", labels=["yes", "no"], include_unknown=True)
        >>> dm.class_names, dm.num_classes, dm.sample_rate
        (('yes', 'no', '_unknown_'), 3, 16000)
    """

    sample_rate: int = 16000

    def __init__(
        self,
        root: str | Path | None = None,
        batch_size: int = 64,
        num_workers: int = 0,
        labels: list[str] | None = None,
        include_unknown: bool = False,
        download: bool = False,
    ) -> None:
        super().__init__()
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"need batch_size >= 1 and num_workers >= 0, got {batch_size} and {num_workers}")
        words = list(CORE_COMMANDS if labels is None else labels)
        if not words or len(set(words)) != len(words) or UNKNOWN in words:
            raise ValueError(f"labels must be distinct words, without {UNKNOWN!r} (use include_unknown), got {words}")
        self.root = root
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.labels = words
        self.include_unknown = include_unknown
        self.download = download
        self._splits: dict[str, list[tuple[str, str]]] | None = None
        self.train_set: AudioClips | None = None
        self.val_set: AudioClips | None = None
        self.test_set: AudioClips | None = None

    @property
    def class_names(self) -> tuple[str, ...]:
        r"""The class of each label index."""
        return (*self.labels, UNKNOWN) if self.include_unknown else tuple(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/SpeechCommands/speech_commands_v0.02``."""
        return resolve_root(self.root, FOLDER_IN_ARCHIVE) / VERSION

    def _missing(self) -> list[str]:
        if not self.dataset_dir.is_dir():
            return [f"{self.dataset_dir}/"]
        return [name for name in _LISTS.values() if not (self.dataset_dir / name).is_file()]

    def _version_dir(self) -> Path:
        missing = self._missing()
        if not missing:
            return self.dataset_dir
        reason, cause = "download=False; the archive is 2.3 GB, pass download=True to fetch it", None
        if self.download:
            try:
                download_speech_commands(self.dataset_dir.parent.parent)
                missing = self._missing()
                if not missing:
                    return self.dataset_dir
                reason = "the download did not produce them"
            except Exception as err:  # no network, server error, bad archive: all end in the same advice
                reason, cause = f"downloading {ARCHIVE_URL} failed: {err}", err
        raise FileNotFoundError(
            f"Speech Commands v0.02 not found: missing {', '.join(missing)} ({reason}). Extract "
            f"{ARCHIVE_URL} into {self.dataset_dir} so that it holds <word>/*.wav, validation_list.txt and "
            f"testing_list.txt, or point root= or the {DATA_ENV} environment variable at a folder that holds "
            f"{FOLDER_IN_ARCHIVE}/{VERSION}/ (e.g. export {DATA_ENV}=/path/to/data)."
        ) from cause

    def prepare_data(self) -> None:
        self._version_dir()

    def setup(self, stage: str | None = None) -> None:
        if self._splits is None:
            version_dir = self._version_dir()
            splits = scan_speech_commands(version_dir)
            found = sorted({word for clips in splits.values() for _, word in clips})
            absent = [w for w in self.labels if w not in found]
            if absent:
                raise ValueError(f"labels {absent} have no clips in {version_dir}; the words found are {found}")
            self._splits = splits
        if stage in (None, "fit", "validate") and self.train_set is None:
            self.train_set, self.val_set = self._clips("train"), self._clips("val")
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self._clips("test")

    def _clips(self, split: str) -> AudioClips:
        assert self._splits is not None
        index = {word: i for i, word in enumerate(self.labels)}
        unknown = len(self.labels) if self.include_unknown else None
        paths, targets = [], []
        for rel, word in self._splits[split]:
            target = index.get(word, unknown)
            if target is not None:
                paths.append(self.dataset_dir / rel)
                targets.append(target)
        return AudioClips(paths, targets, self.sample_rate)

    def __repr__(self) -> str:
        sets = {"train": self.train_set, "val": self.val_set, "test": self.test_set}
        sizes = "".join(f", {name}={len(s)}" for name, s in sets.items() if s is not None)
        return (
            f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, classes={self.num_classes}, "
            f"batch_size={self.batch_size}{sizes})"
        )
