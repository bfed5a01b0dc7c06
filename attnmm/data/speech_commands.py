r"""Google Speech Commands v0.02: one-second spoken commands, 16 kHz mono WAV.

Two folder layouts are read: the full dataset with its official split lists, and the 12 class
folders of the standard keyword-spotting task (the v0.02 test companion set), split here with speakers
disjoint across train, validation and test.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import soundfile
import torch
from torch import Tensor, nn

from attnmm.data._audio import AudioClips, AudioDataModule, read_speakers
from attnmm.data._root import DATA_ENV, data_dir, new_folder

# Folder names as torchaudio's SPEECHCOMMANDS lays the data out: <root>/SpeechCommands/speech_commands_v0.02
FOLDER_IN_ARCHIVE = "SpeechCommands"
VERSION = "speech_commands_v0.02"
ARCHIVE_URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
#: The folder name of the 12-class test companion set ("Speech Commands Data Set Test Files v0.02")
TEST_SET_FOLDER = "speech_commands_test_v0.02"
BACKGROUND_FOLDER = "_background_noise_"
UNKNOWN = "_unknown_"
SILENCE = "_silence_"
CORE_COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
#: The spoken digits among the dataset's words (the classes of FSDD, in order)
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_LISTS = {"val": "validation_list.txt", "test": "testing_list.txt"}
_TAKE = re.compile(r"^(?P<speaker>[0-9A-Za-z]+)_nohash_(?P<take>\d+)\.wav$")
_UNKNOWN_TAKE = re.compile(r"^(?P<word>[^_]+)_(?P<speaker>[0-9A-Za-z]+)_nohash_(?P<take>\d+)\.wav$")
_SPLITS = ("train", "val", "test")
#: The sample rate of the dataset's files (and of its background recordings), in Hz
FILE_RATE = 16000

__all__ = [
    "CORE_COMMANDS",
    "DIGIT_WORDS",
    "SILENCE",
    "SpeechClip",
    "SpeechCommandsDataModule",
    "UNKNOWN",
    "digit_voices",
    "download_speech_commands",
    "scan_class_folders",
    "scan_speech_commands",
    "slice_background",
    "split_speech_commands",
]


@dataclass(frozen=True)
class SpeechClip:
    r"""One clip: the file, the word spoken (``_silence_`` for noise), its speaker (:obj:`None` for
    noise) and, for a slice of a longer recording, its samples ``[start, stop)``."""

    path: Path
    word: str
    speaker: str | None
    span: tuple[int, int] | None = None


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


def _speaker(name: str) -> str | None:
    match = _TAKE.match(name)
    return None if match is None else match["speaker"]


def scan_class_folders(folder: str | Path) -> list[SpeechClip]:
    r"""The clips of a folder in the 12-class layout, sorted by class folder and file name.

    Keyword folders hold ``<speaker>_nohash_<n>.wav``; ``_unknown_`` holds
    ``<word>_<speaker>_nohash_<n>.wav`` (the word is the clip's :attr:`~SpeechClip.word`);
    ``_silence_`` holds noise clips ``<n>.wav`` without a speaker. Hidden files and folders are skipped.

    Args:
        folder (str or Path): the folder that holds the class folders, e.g. ``speech_commands_test_v0.02``.

    Raises:
        ValueError: a ``.wav`` file outside ``_silence_`` does not follow the naming scheme.
    """
    clips = []
    for class_dir in sorted(Path(folder).iterdir()):
        if not class_dir.is_dir() or class_dir.name.startswith("."):
            continue
        for path in sorted(class_dir.glob("*.wav")):
            if path.name.startswith("."):
                continue
            if class_dir.name == SILENCE:
                clips.append(SpeechClip(path, SILENCE, None))
                continue
            pattern, form = (
                (_UNKNOWN_TAKE, "<word>_<speaker>_nohash_<n>.wav")
                if class_dir.name == UNKNOWN
                else (_TAKE, "<speaker>_nohash_<n>.wav")
            )
            match = pattern.match(path.name)
            if match is None:
                raise ValueError(
                    f"unexpected file {path}: clips in {class_dir.name}/ are named {form} (the speaker decides the "
                    "split); rename or remove it"
                )
            word = match["word"] if class_dir.name == UNKNOWN else class_dir.name
            clips.append(SpeechClip(path, word, match["speaker"]))
    return clips


def digit_voices(folder: str | Path) -> list[SpeechClip]:
    r"""The spoken digits (the words ``zero`` to ``nine``) of a Speech Commands folder, as clips with their
    speakers: many voices saying the digits that FSDD's few speakers say.

    Reads either layout: the 12-class one (the v0.02 test companion set, whose ``_unknown_`` folder holds
    the digits as ``<word>_<speaker>_nohash_<n>.wav``) or the full v0.02 one (a folder per word,
    ``validation_list.txt`` beside them).

    Args:
        folder (str or Path): the folder that holds the class or word folders.

    Raises:
        FileNotFoundError: the folder does not exist or holds no spoken digit.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no Speech Commands folder at {folder}")
    if (folder / "validation_list.txt").exists():  # the full layout: a folder per word
        clips = [
            SpeechClip(folder / rel, word, rel.rsplit("/", 1)[-1].split("_nohash_")[0])
            for split in scan_speech_commands(folder).values()
            for rel, word in split
            if word in DIGIT_WORDS
        ]
    else:
        clips = [c for c in scan_class_folders(folder) if c.word in DIGIT_WORDS]
    if not clips:
        raise FileNotFoundError(
            f"{folder} holds no spoken digit: expected Speech Commands clips of the words zero to nine, in "
            "_unknown_/<word>_<speaker>_nohash_<n>.wav (the 12-class layout) or <word>/<speaker>_nohash_<n>.wav"
        )
    return sorted(clips, key=lambda c: c.path.as_posix())


def slice_background(noise_dir: str | Path, sample_rate: int = 16000) -> list[SpeechClip]:
    r"""One-second ``_silence_`` clips cut from the long recordings of ``_background_noise_``.

    Each ``*.wav`` recording gives :math:`\lfloor T / r \rfloor` clips of :math:`r` = ``sample_rate``
    samples, back to back (a shorter rest is dropped), as slices (:attr:`SpeechClip.span`) of it.

    Args:
        noise_dir (str or Path): the ``_background_noise_`` folder.
        sample_rate (int, optional): the recordings' sample rate, also the clip length. (default: ``16000``)

    Raises:
        RuntimeError: a recording cannot be read (the message names it).
        ValueError: a recording's sample rate is not ``sample_rate``.
    """
    clips = []
    for path in sorted(Path(noise_dir).glob("*.wav")):
        try:
            info = soundfile.info(str(path))
        except Exception as err:  # LibsndfileError, OSError, ...
            raise RuntimeError(f"could not read background recording {path}: {err}; replace or remove it") from err
        if info.samplerate != sample_rate:
            raise ValueError(f"background recording {path} has {info.samplerate} Hz, expected {sample_rate} Hz")
        clips += [
            SpeechClip(path, SILENCE, None, (k * sample_rate, (k + 1) * sample_rate))
            for k in range(info.frames // sample_rate)
        ]
    return clips


def _some(names: Sequence[str], k: int = 10) -> str:
    names = sorted(names)
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


def split_speech_commands(
    clips: Sequence[SpeechClip],
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    test_speakers: Sequence[str] | None = None,
    val_speakers: Sequence[str] | None = None,
) -> dict[str, list[SpeechClip]]:
    r"""Split clips into ``train``, ``val`` and ``test`` with every speaker in one split only.

    The speakers, sorted, are shuffled by a generator seeded by ``seed``; the first
    :math:`\lfloor f_\text{test} S + 1/2 \rfloor` of them are the test speakers (or ``test_speakers``),
    the next :math:`\lfloor f_\text{val} S + 1/2 \rfloor` outside the test set the validation speakers
    (or ``val_speakers``), the rest train; :math:`S` is the number of speakers. Clips without a speaker
    (``_silence_``) are shuffled by the same generator and split by the same fractions of their number.
    Each clip keeps its order in ``clips`` within its split; the same arguments give the same split.

    Args:
        clips (Sequence[SpeechClip]): the clips, e.g. from :func:`scan_class_folders`.
        val_fraction (float, optional): share of the speakers (and of the speakerless clips) for
            validation. (default: ``0.1``)
        test_fraction (float, optional): share of the speakers (and of the speakerless clips) for testing;
            with ``test_speakers``, it sets the speakerless clips' share only. (default: ``0.1``)
        seed (int, optional): seed of the draws. (default: ``0``)
        test_speakers (Sequence[str], optional): the test speakers. (default: :obj:`None`, drawn)
        val_speakers (Sequence[str], optional): the validation speakers, none of them a test speaker.
            (default: :obj:`None`, drawn)

    Raises:
        ValueError: a fraction is out of range, a named speaker has no clips, the test and validation
            speakers overlap, or no speaker is left to train on.

    Examples:
        >>> clips = [SpeechClip(Path(f"yes/{s}_nohash_0.wav"), "yes", s) for s in "abcdefghij"]
        >>> clips += [SpeechClip(Path(f"_silence_/{n}.wav"), "_silence_", None) for n in range(10)]
        >>> splits = split_speech_commands(clips, val_fraction=0.2, test_fraction=0.2, seed=0)
        >>> {k: (len({c.speaker for c in v} - {None}), sum(c.speaker is None for c in v)) for k, v in splits.items()}
        {'train': (6, 6), 'val': (2, 2), 'test': (2, 2)}
    """
    if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
        raise ValueError(
            f"need val_fraction >= 0, test_fraction >= 0 and val_fraction + test_fraction < 1 (some speakers must be "
            f"left to train on), got {val_fraction} and {test_fraction}"
        )
    found = sorted({c.speaker for c in clips if c.speaker is not None})
    for name, named in (("test_speakers", test_speakers), ("val_speakers", val_speakers)):
        unknown = sorted(set(named or ()).difference(found))
        if unknown:
            raise ValueError(
                f"{name} {unknown} have no clips; the {len(found)} speakers found include {_some(found)} "
                "(a speaker id is the part of a file name before _nohash_)"
            )
    both = sorted(set(test_speakers or ()) & set(val_speakers or ()))
    if both:
        raise ValueError(
            f"speakers {both} are in both test_speakers and val_speakers; a held-out speaker is either validated on "
            "or tested on, remove them from one of the lists"
        )
    generator = torch.Generator().manual_seed(seed)

    def count(fraction: float, n: int) -> int:
        return math.floor(fraction * n + 0.5)

    order = [found[i] for i in torch.randperm(len(found), generator=generator).tolist()]
    test = set(order[: count(test_fraction, len(found))] if test_speakers is None else test_speakers)
    rest = [s for s in order if s not in test]
    val = set(rest[: count(val_fraction, len(found))] if val_speakers is None else val_speakers)
    if found and not set(rest) - val:
        raise ValueError(
            f"no speaker is left to train on: {len(test)} test and {len(val)} validation speakers of {len(found)}; "
            "lower test_fraction / val_fraction or name fewer speakers"
        )
    where = {s: "test" if s in test else "val" if s in val else "train" for s in found}
    silent = [i for i, c in enumerate(clips) if c.speaker is None]
    drawn = [silent[i] for i in torch.randperm(len(silent), generator=generator).tolist()]
    k_test, k_val = count(test_fraction, len(silent)), count(val_fraction, len(silent))
    silent_where = {i: "test" for i in drawn[:k_test]} | {i: "val" for i in drawn[k_test : k_test + k_val]}
    splits: dict[str, list[SpeechClip]] = {split: [] for split in _SPLITS}
    for i, clip in enumerate(clips):
        split = silent_where.get(i, "train") if clip.speaker is None else where[clip.speaker]
        splits[split].append(clip)
    return splits


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _noise_takers(augment: nn.Module) -> list[nn.Module]:
    """The modules of ``augment`` that take a noise bank (a ``set_noise`` method)."""
    return [m for m in augment.modules() if callable(getattr(m, "set_noise", None))]


def _is_class_folder(folder: Path) -> bool:
    """A folder in the 12-class layout: it holds ``_silence_/`` or ``_unknown_/`` and no official lists."""
    return ((folder / SILENCE).is_dir() or (folder / UNKNOWN).is_dir()) and not (folder / _LISTS["test"]).exists()


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
    # a failed download removes the folders it made, unless it keeps a complete archive there for a retry
    with new_folder(base), tempfile.TemporaryDirectory(prefix=".speech-commands-", dir=base) as tmp:
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

    Two layouts (``layout``; ``"auto"`` picks the one it finds):

    - ``"full"``, the dataset as released, read from
      ``<root>/SpeechCommands/speech_commands_v0.02/<word>/<speaker>_nohash_<n>.wav`` (torchaudio's
      ``SPEECHCOMMANDS`` layout, ``--data.download=true`` fetches it). The splits are the dataset's own:
      ``validation_list.txt``, ``testing_list.txt``, all other clips for training
      (:func:`scan_speech_commands`); they keep speakers apart. ``_background_noise_`` recordings are cut
      into one-second ``_silence_`` clips (:func:`slice_background`), split by ``val_fraction`` and
      ``test_fraction``.
    - ``"classes"``, the 12 class folders of the standard task, ``yes ... go``, ``_unknown_`` (other
      words, ``<word>_<speaker>_nohash_<n>.wav``) and ``_silence_`` (noise, ``<n>.wav``), as in the
      v0.02 test companion set (``speech_commands_test_v0.02``). ``root`` is the folder that holds the
      class folders (or a base folder holding ``speech_commands_test_v0.02/``). The splits are made here,
      with every speaker in one split only (:func:`split_speech_commands`): ``test_fraction`` of the
      speakers (drawn with ``seed``) or ``test_speakers`` are the test set, ``val_fraction`` of them
      (or ``val_speakers``) validation, the rest train; ``_silence_`` clips, which have no speaker, are
      split by the same fractions. With ``test_root`` (a second folder in this layout, none of whose
      speakers is in ``root``) every clip under ``test_root`` is the test set and every clip under
      ``root`` is train or validation.

    ``"auto"`` resolves ``root`` (``None``: ``$ATTNMM_DATA``, then ``~/.cache/attnmm``) in this order:
    ``root`` itself holds class folders (``_silence_/`` or ``_unknown_/``, no ``testing_list.txt``);
    ``<root>/SpeechCommands/speech_commands_v0.02`` with its lists; ``<root>/speech_commands_test_v0.02``;
    else the full dataset is downloaded (``download=True``) or an error says where to put it.

    Classes, in this order: ``labels`` (default: the ten core commands yes, no, up, down, left, right,
    on, off, stop, go), then ``_unknown_`` (``include_unknown``: every other word) and ``_silence_``
    (``include_silence``). Both default to on in the ``"classes"`` layout (the 12-class task) and off in
    the ``"full"`` layout (the ten commands). Clips of a class left out are dropped. In YAML configs
    quote the words: unquoted ``yes``, ``no``, ``on`` and ``off`` are read as booleans.

    Noise augmentation: ``noise_augment`` (e.g. :class:`~attnmm.data.BackgroundNoise`) is applied to
    the training batches only, and its noise bank is the training split's ``_silence_`` clips
    (:meth:`train_noise`), so no noise used in training is in a validation or test clip and no path is
    given twice. Clips are read with :mod:`soundfile` when a batch needs them and are not padded to one
    second: batches are padded to their longest clip.

    Batches are :class:`~attnmm.data.AudioBatch` dicts: ``waveform`` (B, T) zero-padded, ``lengths`` (B,),
    ``label`` (B,); :attr:`sample_rate` is the files' 16000 Hz unless ``sample_rate`` asks for another rate,
    to which every clip (and noise clip) is then resampled when read, e.g. 8000 to pretrain a model for
    FSDD's 8 kHz recordings (link a model's sample rate to it). The split sets are
    :class:`~attnmm.data.AudioClips` whose ``speakers`` give each clip's speaker; :meth:`summary` and the
    ``repr`` report the clips and speakers of each split.

    Args:
        root (str or Path, optional): the base data folder holding ``SpeechCommands/`` or
            ``speech_commands_test_v0.02/``, or the folder that holds the class folders.
            (default: :obj:`None`)
        batch_size (int, optional): clips per batch. (default: ``64``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        labels (list[str], optional): the words to classify. (default: :obj:`None`, the ten core commands)
        include_unknown (bool, optional): map all other words to a class ``_unknown_`` after the words
            instead of dropping them. (default: :obj:`None`, on in the ``"classes"`` layout only)
        download (bool, optional): download the full dataset's 2.3 GB archive with torchaudio when no
            data is found (``"full"`` and ``"auto"``). (default: :obj:`False`)
        layout (str, optional): ``"auto"``, ``"full"`` or ``"classes"``. (default: ``"auto"``)
        include_silence (bool, optional): a last class ``_silence_`` of noise clips. (default: :obj:`None`,
            on in the ``"classes"`` layout only)
        val_fraction (float, optional): share of the speakers (``"classes"``) and of the ``_silence_``
            clips (both layouts) for validation. (default: ``0.1``)
        test_fraction (float, optional): share of the speakers (``"classes"``) and of the ``_silence_``
            clips (both layouts) for testing; unused with ``test_root``. (default: ``0.1``)
        seed (int, optional): seed of the speaker and ``_silence_`` draws. (default: ``0``)
        test_speakers (list[str] or str, optional): the test speakers (``"classes"``), a list of ids or
            the path of a text file with one id per line (blank lines and ``#`` comments ignored).
            (default: :obj:`None`, drawn by ``test_fraction``)
        val_speakers (list[str] or str, optional): the validation speakers (``"classes"``), as
            ``test_speakers``. (default: :obj:`None`, drawn by ``val_fraction``)
        test_root (str or Path, optional): a second folder in the ``"classes"`` layout whose clips are
            all the test set; then ``root``'s clips are all train or validation. (default: :obj:`None`)
        noise_augment (nn.Module, optional): an augmentation ``(waveform, lengths) -> (waveform, lengths)``
            applied to training batches; its modules with a ``set_noise`` method (e.g.
            :class:`~attnmm.data.BackgroundNoise`) get :meth:`train_noise`. (default: :obj:`None`)
        sample_rate (int, optional): the rate of the waveforms in Hz; clips are resampled from the files'
            16000 Hz when it differs. (default: ``16000``)

    Examples:
        >>> dm = SpeechCommandsDataModule(root="/data", labels=["yes", "no"], include_unknown=True)
        >>> dm.class_names, dm.num_classes, dm.sample_rate
        (('yes', 'no', '_unknown_'), 3, 16000)
        >>> dm = SpeechCommandsDataModule(root="/data/speech_commands_test_v0.02", layout="classes")
        >>> dm.class_names[-3:], dm.num_classes
        (('go', '_unknown_', '_silence_'), 12)
        >>> SpeechCommandsDataModule(root="/data", sample_rate=8000).sample_rate  # resampled when read
        8000
    """

    def __init__(
        self,
        root: str | Path | None = None,
        batch_size: int = 64,
        num_workers: int = 0,
        labels: list[str] | None = None,
        include_unknown: bool | None = None,
        download: bool = False,
        layout: Literal["auto", "full", "classes"] = "auto",
        include_silence: bool | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        test_speakers: list[str] | str | None = None,
        val_speakers: list[str] | str | None = None,
        test_root: str | Path | None = None,
        noise_augment: nn.Module | None = None,
        sample_rate: int = FILE_RATE,
    ) -> None:
        super().__init__()
        if not isinstance(sample_rate, int) or sample_rate < 1:
            raise ValueError(f"sample_rate is a rate in Hz (an int >= 1, e.g. 16000 or 8000), got {sample_rate!r}")
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"need batch_size >= 1 and num_workers >= 0, got {batch_size} and {num_workers}")
        words = list(CORE_COMMANDS if labels is None else labels)
        if not words or len(set(words)) != len(words) or UNKNOWN in words or SILENCE in words:
            raise ValueError(
                f"labels must be distinct words, without {UNKNOWN!r} or {SILENCE!r} (use include_unknown and "
                f"include_silence), got {words}"
            )
        if layout not in ("auto", "full", "classes"):
            raise ValueError(f"layout must be 'auto', 'full' or 'classes', got {layout!r}")
        if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
            raise ValueError(
                "need val_fraction >= 0, test_fraction >= 0 and val_fraction + test_fraction < 1, got "
                f"{val_fraction} and {test_fraction}"
            )
        if test_root is not None and test_speakers is not None:
            raise ValueError(
                "pass test_root or test_speakers, not both: with test_root every clip under it is the test set"
            )
        for name, given in (("test_speakers", test_speakers), ("val_speakers", val_speakers)):
            if isinstance(given, (list, tuple)):  # a file is read in setup
                read_speakers(given, name)
        if isinstance(test_speakers, (list, tuple)) and isinstance(val_speakers, (list, tuple)):
            both = sorted(set(test_speakers) & set(val_speakers))
            if both:
                raise ValueError(
                    f"speakers {both} are in both test_speakers and val_speakers; a held-out speaker is either "
                    "validated on or tested on, remove them from one of the lists"
                )
        if noise_augment is not None and not _noise_takers(noise_augment):
            raise ValueError(
                f"noise_augment {type(noise_augment).__name__} has no module that takes noise clips (set_noise); "
                "use attnmm.data.BackgroundNoise (alone or in a ChainAugment)"
            )
        self.root = root
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.labels = words
        self.include_unknown = include_unknown
        self.include_silence = include_silence
        self.download = download
        self.layout = layout
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.seed = seed
        # a list is kept as a list; a file is read in setup
        self.test_speakers = list(test_speakers) if isinstance(test_speakers, (list, tuple)) else test_speakers
        self.val_speakers = list(val_speakers) if isinstance(val_speakers, (list, tuple)) else val_speakers
        self.test_root = test_root
        self.noise_augment = noise_augment
        self.sample_rate = sample_rate
        self._found: tuple[str, Path] | None = None
        self._splits: dict[str, list[SpeechClip]] | None = None
        self._held_out: dict[str, list[str] | None] = {}
        self._noise: list[Tensor] | None = None
        self.train_set: AudioClips | None = None
        self.val_set: AudioClips | None = None
        self.test_set: AudioClips | None = None

    # ------------------------------------------------------------------ where the data is

    def _find(self) -> tuple[str, Path] | None:
        """``(layout, folder)`` of the data found, without downloading; None when there is none."""
        if self._found is None:
            base = data_dir(self.root)
            full = base / FOLDER_IN_ARCHIVE / VERSION
            if self.layout != "full" and _is_class_folder(base):
                self._found = ("classes", base)
            elif self.layout != "classes" and not self._missing_full(full):
                self._found = ("full", full)
            elif self.layout != "full" and _is_class_folder(base / TEST_SET_FOLDER):
                self._found = ("classes", base / TEST_SET_FOLDER)
        return self._found

    @staticmethod
    def _missing_full(full: Path) -> list[str]:
        if not full.is_dir():
            return [f"{full}/"]
        return [name for name in _LISTS.values() if not (full / name).is_file()]

    @property
    def dataset_layout(self) -> str:
        r"""The layout of the data found, ``"full"`` or ``"classes"`` (``layout`` unless it is ``"auto"``)."""
        found = self._find()
        return found[0] if found is not None else "classes" if self.layout == "classes" else "full"

    @property
    def dataset_dir(self) -> Path:
        r"""The folder read: ``<root>/SpeechCommands/speech_commands_v0.02`` (``"full"``) or the folder that
        holds the class folders (``"classes"``)."""
        found = self._find()
        if found is not None:
            return found[1]
        base = data_dir(self.root)
        if self.layout == "classes":
            return base if self.root is not None else base / TEST_SET_FOLDER
        return base / FOLDER_IN_ARCHIVE / VERSION

    def _locate(self) -> tuple[str, Path]:
        found = self._find()
        if found is not None:
            return found
        base = data_dir(self.root)
        classes_hint = (
            f"For the 12 class folders of {TEST_SET_FOLDER} (yes ... go, {UNKNOWN}, {SILENCE}), point root= at the "
            f"folder that holds them, or at a folder holding {TEST_SET_FOLDER}/"
        )
        if self.layout == "classes":
            raise FileNotFoundError(
                f"Speech Commands class folders not found: neither {base} nor {base / TEST_SET_FOLDER} holds "
                f"{SILENCE}/ or {UNKNOWN}/ (layout='classes'). {classes_hint} (root= or the {DATA_ENV} environment "
                f"variable, e.g. export {DATA_ENV}=/path/to/data)."
            )
        full = base / FOLDER_IN_ARCHIVE / VERSION
        missing = self._missing_full(full)
        reason, cause = "download=False; the archive is 2.3 GB, pass download=True to fetch it", None
        if self.download:
            try:
                download_speech_commands(base)
                missing = self._missing_full(full)
                if not missing:
                    self._found = ("full", full)
                    return self._found
                reason = "the download did not produce them"
            except Exception as err:  # no network, server error, bad archive: all end in the same advice
                reason, cause = f"downloading {ARCHIVE_URL} failed: {err}", err
        raise FileNotFoundError(
            f"Speech Commands v0.02 not found: missing {', '.join(missing)} ({reason}). Extract "
            f"{ARCHIVE_URL} into {full} so that it holds <word>/*.wav, validation_list.txt and "
            f"testing_list.txt, or point root= or the {DATA_ENV} environment variable at a folder that holds "
            f"{FOLDER_IN_ARCHIVE}/{VERSION}/ (e.g. export {DATA_ENV}=/path/to/data)."
            + f" {classes_hint} (layout='classes' or 'auto')."
        ) from cause

    # ------------------------------------------------------------------ classes

    def _unknown_on(self) -> bool:
        return self.dataset_layout == "classes" if self.include_unknown is None else self.include_unknown

    def _silence_on(self) -> bool:
        return self.dataset_layout == "classes" if self.include_silence is None else self.include_silence

    @property
    def class_names(self) -> tuple[str, ...]:
        r"""The class of each label index: the words, then ``_unknown_`` and ``_silence_`` when included."""
        return (*self.labels, *((UNKNOWN,) if self._unknown_on() else ()), *((SILENCE,) if self._silence_on() else ()))

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _target(self, clip: SpeechClip) -> int | None:
        names = self.class_names
        if clip.word == SILENCE:
            return names.index(SILENCE) if SILENCE in names else None
        if clip.word in self.labels:
            return self.labels.index(clip.word)
        return names.index(UNKNOWN) if UNKNOWN in names else None

    # ------------------------------------------------------------------ splits

    def prepare_data(self) -> None:
        self._locate()

    def _make_splits(self) -> dict[str, list[SpeechClip]]:
        layout, folder = self._locate()
        if layout == "full":
            given = [n for n in ("test_speakers", "val_speakers", "test_root") if getattr(self, n) is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} apply to the 'classes' layout; {folder} is the full dataset, whose official "
                    "lists (validation_list.txt, testing_list.txt) give speaker-disjoint splits. Drop them, or point "
                    f"root= at a folder of class folders ({TEST_SET_FOLDER})"
                )
            splits = {
                split: [SpeechClip(folder / rel, word, _speaker(Path(rel).name)) for rel, word in pairs]
                for split, pairs in scan_speech_commands(folder).items()
            }
            noise_dir = folder / BACKGROUND_FOLDER
            slices = slice_background(noise_dir, FILE_RATE) if noise_dir.is_dir() else []
            for split, clips in split_speech_commands(slices, self.val_fraction, self.test_fraction, self.seed).items():
                splits[split] += clips
            return splits
        clips = scan_class_folders(folder)
        test_ids = read_speakers(self.test_speakers, "test_speakers")
        val_ids = read_speakers(self.val_speakers, "val_speakers")
        self._held_out = {"test": test_ids, "val": val_ids}
        if self.test_root is None:
            return split_speech_commands(clips, self.val_fraction, self.test_fraction, self.seed, test_ids, val_ids)
        test_root = Path(self.test_root).expanduser()
        if not _is_class_folder(test_root):
            raise FileNotFoundError(
                f"test_root {test_root} is not a folder of class folders: it must hold {SILENCE}/ or {UNKNOWN}/ "
                f"and the keyword folders, like {TEST_SET_FOLDER}/ itself"
            )
        test = scan_class_folders(test_root)
        shared = {c.speaker for c in test} & {c.speaker for c in clips} - {None}
        if shared:
            raise ValueError(
                f"test_root {test_root} shares {len(shared)} speakers with root {folder} ({_some(shared, 5)}): every "
                "speaker must be in one split only. Remove their clips from one of the folders, or drop test_root "
                "and let test_fraction or test_speakers hold speakers out of root"
            )
        splits = split_speech_commands(clips, self.val_fraction, 0.0, self.seed, val_speakers=val_ids)
        splits["test"] = test
        return splits

    def setup(self, stage: str | None = None) -> None:
        if self._splits is None:
            splits = self._make_splits()
            found = sorted({c.word for clips in splits.values() for c in clips} - {SILENCE})
            absent = [w for w in self.labels if w not in found]
            if absent:
                raise ValueError(f"labels {absent} have no clips in {self.dataset_dir}; the words found are {found}")
            if self._silence_on() and not any(c.word == SILENCE for clips in splits.values() for c in clips):
                where = BACKGROUND_FOLDER if self.dataset_layout == "full" else SILENCE
                raise ValueError(
                    f"include_silence=True but {self.dataset_dir} has no {where}/ clips; add them, or pass "
                    "include_silence=False"
                )
            self._splits = splits
        if stage in (None, "fit", "validate") and self.train_set is None:
            self.train_set, self.val_set = self._clips("train"), self._clips("val")
            if self.noise_augment is not None:
                noise = self.train_noise()
                if not noise:
                    raise ValueError(
                        f"noise_augment needs noise clips, but the training split of {self.dataset_dir} has no "
                        f"{SILENCE} clips (or {BACKGROUND_FOLDER} recordings); add them or drop noise_augment"
                    )
                for module in _noise_takers(self.noise_augment):
                    module.set_noise(noise)
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self._clips("test")

    def _kept(self, split: str) -> list[tuple[SpeechClip, int]]:
        if self._splits is None:
            raise RuntimeError("the splits are made in setup(); call dm.setup() first")
        return [(c, t) for c in self._splits[split] if (t := self._target(c)) is not None]

    def _clips(self, split: str) -> AudioClips:
        kept = self._kept(split)
        return AudioClips(
            [c.path for c, _ in kept],
            [t for _, t in kept],
            self.sample_rate,
            speakers=[c.speaker for c, _ in kept],
            spans=[c.span for c, _ in kept],
            file_rate=FILE_RATE,
        )

    @property
    def train_augment(self) -> nn.Module | None:  # type: ignore[override]  # AudioDataModule's hook
        return self.noise_augment

    def train_noise(self) -> list[Tensor]:
        r"""The training split's noise clips, decoded: its ``_silence_`` clips (``"classes"``) or one-second
        slices of ``_background_noise_`` (``"full"``), whether or not ``_silence_`` is a class. Clips of
        the validation and test splits are never among them. Needs :meth:`setup`."""
        if self._noise is None:
            if self._splits is None:
                raise RuntimeError("the training noise is known after setup(); call dm.setup('fit') first")
            silence = [c for c in self._splits["train"] if c.word == SILENCE]
            spans = [c.span for c in silence]
            noise = AudioClips(
                [c.path for c in silence], [0] * len(silence), self.sample_rate, spans=spans, file_rate=FILE_RATE
            )
            self._noise = [noise[i][0] for i in range(len(noise))]
        return self._noise

    @property
    def speakers(self) -> list[str]:
        r"""Every speaker found (under ``root`` and ``test_root``), sorted (after :meth:`setup`)."""
        if self._splits is None:
            raise RuntimeError("speakers are known after setup(); call dm.setup() first")
        return sorted({c.speaker for clips in self._splits.values() for c in clips if c.speaker is not None})

    @property
    def split_speakers(self) -> dict[str, list[str]]:
        r"""The speakers of each split's clips (of the classes kept), sorted (after :meth:`setup`)."""
        return {
            split: sorted({c.speaker for c, _ in self._kept(split) if c.speaker is not None}) for split in _SPLITS
        }

    # ------------------------------------------------------------------ reports

    def _sizes(self) -> dict[str, tuple[int, int, int]]:
        """split -> (clips, speakers, silence clips) of the classes kept."""
        sizes = {}
        for split in _SPLITS:
            kept = self._kept(split)
            speakers = {c.speaker for c, _ in kept if c.speaker is not None}
            sizes[split] = (len(kept), len(speakers), sum(c.word == SILENCE for c, _ in kept))
        return sizes

    def __repr__(self) -> str:
        sizes = ""
        if self._splits is not None:
            sizes = "".join(f", {k}={n} ({_count(s, 'speaker')})" for k, (n, s, _) in self._sizes().items())
        return (
            f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, layout={self.dataset_layout!r}, "
            f"classes={self.num_classes}, batch_size={self.batch_size}{sizes})"
        )

    def _named(self, split: str) -> str:
        """The named speakers of ``split`` (test or val) for the summary; a file's ids after setup."""
        given = self.test_speakers if split == "test" else self.val_speakers
        ids = self._held_out.get(split) or (given if isinstance(given, list) else None)
        return f"listed in {given}" if ids is None else _some(ids, 5)

    def _rule(self) -> str:
        silence = f"{SILENCE} clips: {self.val_fraction:.0%} validation"
        if self.dataset_layout == "full":
            return f"the official lists (speakers disjoint); {silence}, {self.test_fraction:.0%} test, seed {self.seed}"
        if self.test_root is not None:
            test = f"every clip of {Path(self.test_root).expanduser()} is the test set"
        elif self.test_speakers is not None:
            test = f"test speakers {self._named('test')}"
        else:
            test = f"{self.test_fraction:.0%} of speakers test"
        val = (
            f"{self.val_fraction:.0%} of speakers validation"
            if self.val_speakers is None
            else f"validation speakers {self._named('val')}"
        )
        share = "" if self.test_root is not None else f", {self.test_fraction:.0%} test"
        return f"speakers disjoint: {test}, {val}, seed {self.seed}; {silence}{share}"

    def summary(self) -> str:
        r"""A few lines on the data found, the classes and the split (complete after :meth:`setup`)."""
        lines = [
            f"Speech Commands v0.02 at {self.dataset_dir} (layout {self.dataset_layout!r})",
            f"  {self.sample_rate} Hz mono{self._resampled()}, {self.num_classes} classes: "
            + ", ".join(self.class_names),
            f"  split: {self._rule()}",
        ]
        if self._splits is not None:
            lines.insert(2, f"  {sum(n for n, _, _ in self._sizes().values())} clips of {len(self.speakers)} speakers")
            lines += [
                f"  {split}: {_count(n, 'clip')}, {_count(s, 'speaker')}, {q} {SILENCE}"
                for split, (n, s, q) in self._sizes().items()
            ]
            if self.noise_augment is not None:
                count = sum(c.word == SILENCE for c in self._splits["train"])
                lines.append(f"  noise augmentation on training batches, from the {count} training noise clips")
        return "\n".join(lines)

    def _resampled(self) -> str:
        return "" if self.sample_rate == FILE_RATE else f" (resampled from {FILE_RATE} Hz)"

    def __str__(self) -> str:
        return self.summary()
