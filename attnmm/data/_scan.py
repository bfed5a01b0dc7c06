r"""Finding the recordings of the speech datasets: the files of FSDD and of Speech Commands (either layout),
and who speaks in each (the speaker decides a clip's split)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile

from attnmm.data._root import DATA_ENV, new_folder

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
LISTS = {"val": "validation_list.txt", "test": "testing_list.txt"}
TAKE = re.compile(r"^(?P<speaker>[0-9A-Za-z]+)_nohash_(?P<take>\d+)\.wav$")
UNKNOWN_TAKE = re.compile(r"^(?P<word>[^_]+)_(?P<speaker>[0-9A-Za-z]+)_nohash_(?P<take>\d+)\.wav$")
SPLITS = ("train", "val", "test")
#: The sample rate of the dataset's files (and of its background recordings), in Hz
FILE_RATE = 16000
#: FSDD's file names, ``{digit}_{speaker}_{index}.wav``
FSDD_FILE_NAME = re.compile(r"^(?P<digit>\d)_(?P<speaker>[A-Za-z0-9]+)_(?P<index>\d+)\.wav$")
OWN_TEST_TAKES = 5  # the dataset's own split: takes 0-4 of every speaker and digit are the test set

__all__ = ["FSDDTake", "SpeechClip", "digit_voices", "download_speech_commands", "scan_class_folders", "scan_fsdd",
           "scan_speech_commands", "slice_background"]


@dataclass(frozen=True)
class FSDDTake:
    r"""One recording ``{digit}_{speaker}_{index}.wav``."""

    path: Path
    digit: int
    speaker: str
    index: int


def scan_fsdd(recordings: str | Path) -> list[FSDDTake]:
    r"""List the recordings in a ``recordings/`` folder, sorted by digit, speaker and take index.

    Args:
        recordings (str or Path): the folder holding ``{digit}_{speaker}_{index}.wav``.

    Raises:
        ValueError: a ``.wav`` file does not follow the naming scheme (hidden files are skipped).
    """
    takes = []
    for entry in os.scandir(recordings):
        if entry.name.startswith(".") or not entry.name.endswith(".wav"):
            continue
        match = FSDD_FILE_NAME.match(entry.name)
        if match is None:
            raise ValueError(
                f"unexpected file {entry.path}: FSDD recordings are named {{digit}}_{{speaker}}_{{index}}.wav "
                "(e.g. 3_theo_12.wav); rename or remove it"
            )
        takes.append(FSDDTake(Path(entry.path), int(match["digit"]), match["speaker"], int(match["index"])))
    return sorted(takes, key=lambda t: (t.digit, t.speaker, t.index))


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
    for split, list_name in LISTS.items():
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


def speaker_of(name: str) -> str | None:
    match = TAKE.match(name)
    return None if match is None else match["speaker"]


def full_layout_clips(version_dir: Path) -> dict[str, list[SpeechClip]]:
    """The clips of each split of :func:`scan_speech_commands`, with their speakers."""
    return {split: [SpeechClip(version_dir / rel, word, speaker_of(Path(rel).name)) for rel, word in pairs]
            for split, pairs in scan_speech_commands(version_dir).items()}


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
                (UNKNOWN_TAKE, "<word>_<speaker>_nohash_<n>.wav")
                if class_dir.name == UNKNOWN
                else (TAKE, "<speaker>_nohash_<n>.wav")
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
        clips = [c for split in full_layout_clips(folder).values() for c in split if c.word in DIGIT_WORDS]
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


def is_class_folder(folder: Path) -> bool:
    """A folder in the 12-class layout: it holds ``_silence_/`` or ``_unknown_/`` and no official lists."""
    return ((folder / SILENCE).is_dir() or (folder / UNKNOWN).is_dir()) and not (folder / LISTS["test"]).exists()


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


def missing_lists(full: Path) -> list[str]:
    """What the full dataset's folder ``full`` lacks: itself, or its official split lists."""
    if not full.is_dir():
        return [f"{full}/"]
    return [name for name in LISTS.values() if not (full / name).is_file()]


def find_speech_commands(base: Path, layout: str) -> tuple[str, Path] | None:
    """``(layout, folder)`` of the Speech Commands data under ``base`` (see ``SpeechCommandsDataModule``'s
    ``layout``), without downloading; None when there is none."""
    full = base / FOLDER_IN_ARCHIVE / VERSION
    if layout != "full" and is_class_folder(base):
        return ("classes", base)
    if layout != "classes" and not missing_lists(full):
        return ("full", full)
    if layout != "full" and is_class_folder(base / TEST_SET_FOLDER):
        return ("classes", base / TEST_SET_FOLDER)
    return None


def locate_speech_commands(
    base: Path, layout: str, download: Callable[[Path], None] | None = None
) -> tuple[str, Path]:
    """``(layout, folder)`` of the Speech Commands data under ``base``, the full dataset fetched there by
    ``download`` (e.g. :func:`download_speech_commands`) when none is found; else an error that says what to
    put where."""
    found = find_speech_commands(base, layout)
    if found is not None:
        return found
    classes_hint = (
        f"For the 12 class folders of {TEST_SET_FOLDER} (yes ... go, {UNKNOWN}, {SILENCE}), point root= at the "
        f"folder that holds them, or at a folder holding {TEST_SET_FOLDER}/"
    )
    if layout == "classes":
        raise FileNotFoundError(
            f"Speech Commands class folders not found: neither {base} nor {base / TEST_SET_FOLDER} holds "
            f"{SILENCE}/ or {UNKNOWN}/ (layout='classes'). {classes_hint} (root= or the {DATA_ENV} environment "
            f"variable, e.g. export {DATA_ENV}=/path/to/data)."
        )
    full = base / FOLDER_IN_ARCHIVE / VERSION
    missing = missing_lists(full)
    reason, cause = "download=False; the archive is 2.3 GB, pass download=True to fetch it", None
    if download is not None:
        try:
            download(base)
            missing = missing_lists(full)
            if not missing:
                return ("full", full)
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


def check_words(splits: dict[str, list[SpeechClip]], labels: Sequence[str], silence: bool, folder: Path,
                layout: str) -> None:
    """Refuse labels without clips, or a ``_silence_`` class without noise clips, in the ``splits`` of ``folder``."""
    found = sorted({c.word for clips in splits.values() for c in clips} - {SILENCE})
    absent = [w for w in labels if w not in found]
    if absent:
        raise ValueError(f"labels {absent} have no clips in {folder}; the words found are {found}")
    if silence and not any(c.word == SILENCE for clips in splits.values() for c in clips):
        where = BACKGROUND_FOLDER if layout == "full" else SILENCE
        raise ValueError(f"include_silence=True but {folder} has no {where}/ clips; add them, or pass "
                         "include_silence=False")
