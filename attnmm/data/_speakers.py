r"""Speaker-disjoint splits of the speech datasets: held-out speakers named (a list or a file of ids) or drawn,
so that no voice of a validation or test clip is trained on."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from attnmm.data._scan import (
    BACKGROUND_FOLDER,
    FILE_RATE,
    OWN_TEST_TAKES,
    SILENCE,
    SPLITS,
    TEST_SET_FOLDER,
    UNKNOWN,
    FSDDTake,
    SpeechClip,
    full_layout_clips,
    is_class_folder,
    scan_class_folders,
    slice_background,
)

__all__ = ["check_disjoint", "check_fractions", "read_speakers", "split_fsdd", "split_speech_commands"]


def read_speakers(speakers: Sequence[str] | str | os.PathLike | None, name: str = "speakers") -> list[str] | None:
    r"""Speaker ids given as a list, or as the path of a text file of ids, one per line.

    In a file, blank lines and ``#`` comments (whole lines or line ends) are ignored.

    Args:
        speakers (list[str] or str or Path, optional): the ids, or the file that lists them;
            :obj:`None` passes through.
        name (str, optional): the argument's name, for the error messages. (default: ``"speakers"``)

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: no ids are given (an empty list or a file with none) or an id repeats.

    Examples:
        >>> read_speakers(["theo", "lucas"])
        ['theo', 'lucas']
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "held_out.txt")
        ...     _ = open(path, "w").write("# unseen voices\ntheo\n\nlucas  # second\n")
        ...     read_speakers(path)
        ['theo', 'lucas']
    """
    if speakers is None:
        return None
    if isinstance(speakers, (str, os.PathLike)):
        path = Path(speakers).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"{name}: no file {path}; pass a list of speaker ids, or the path of a text file with one id "
                "per line (blank lines and # comments are ignored)"
            )
        ids = [i for line in path.read_text().splitlines() if (i := line.split("#", 1)[0].strip())]
        source = f" in {path}"
    else:
        ids, source = [str(s) for s in speakers], ""
    if not ids:
        raise ValueError(f"{name}: no speaker ids{source}; name at least one speaker, or pass None")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{name}: speakers {repeated} are listed more than once{source}; list each speaker once")
    return ids


def check_disjoint(test: Sequence[str] | None, val: Sequence[str] | None) -> None:
    """Refuse a speaker named both for the test and for the validation set."""
    both = sorted(set(test or ()) & set(val or ()))
    if both:
        raise ValueError(
            f"speakers {both} are in both test_speakers and val_speakers; a held-out speaker is either "
            "validated on or tested on, remove them from one of the lists"
        )


def some_names(names: Sequence[str], k: int = 10) -> str:
    names = sorted(names)
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def split_fsdd(
    takes: Sequence[FSDDTake], test_speakers: Sequence[str] | None = None, val_fraction: float = 0.1, seed: int = 0,
    val_speakers: Sequence[str] | None = None,
) -> tuple[list[FSDDTake], list[FSDDTake], list[FSDDTake]]:
    r"""Split takes into ``(train, val, test)``.

    ``test_speakers=None`` is the dataset's own split: takes 0-4 of every speaker are the test set.
    Otherwise every take of those speakers is the test set, and none of their takes is trained on or
    validated on. The validation set is ``val_fraction`` of the remaining takes, drawn per digit
    (stratified) with a generator seeded by ``seed``, so the same arguments give the same split.
    With ``val_speakers``, the validation set is instead every take of those speakers (outside the
    test set), none of which is trained on: model selection then sees only unseen voices, and
    ``val_fraction`` and ``seed`` are unused.

    Args:
        takes (Sequence[FSDDTake]): all recordings, from :func:`scan_fsdd`.
        test_speakers (Sequence[str], optional): speakers held out for testing. (default: :obj:`None`)
        val_fraction (float, optional): share of the training takes kept for validation. (default: ``0.1``)
        seed (int, optional): seed of the validation draw. (default: ``0``)
        val_speakers (Sequence[str], optional): speakers held out for validation; disjoint from
            ``test_speakers``. (default: :obj:`None`, a ``val_fraction`` draw of the training takes)

    Raises:
        ValueError: a named speaker has no recordings, the validation and test speakers overlap, or
            no speaker is left to train on.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    found = sorted({t.speaker for t in takes})
    for name, speakers in (("test_speakers", test_speakers), ("val_speakers", val_speakers)):
        unknown = sorted(set(speakers or ()).difference(found))
        if unknown:
            raise ValueError(f"{name} {unknown} have no recordings; the speakers found are {found}")
    check_disjoint(test_speakers, val_speakers)
    held_out = None if test_speakers is None else set(test_speakers)
    tested = [t.index < OWN_TEST_TAKES if held_out is None else t.speaker in held_out for t in takes]
    test, rest = [t for t, x in zip(takes, tested) if x], [t for t, x in zip(takes, tested) if not x]
    if held_out is not None and not rest:
        raise ValueError(f"test_speakers {sorted(held_out)} are all the speakers; leave at least one to train on")
    if val_speakers is not None:
        val_set = set(val_speakers)
        train = [t for t in rest if t.speaker not in val_set]
        if not train:
            left = sorted(set(found).difference(test_speakers or ()))
            raise ValueError(
                f"val_speakers {sorted(val_set)} leave no speaker to train on (speakers outside the test set: "
                f"{left}); keep at least one of them for training"
            )
        return train, [t for t in rest if t.speaker in val_set], test
    generator = torch.Generator().manual_seed(seed)
    val_ids: set[int] = set()
    for digit in sorted({t.digit for t in rest}):
        group = [i for i, t in enumerate(rest) if t.digit == digit]
        k = math.floor(len(group) * val_fraction + 0.5)
        val_ids.update(group[j] for j in torch.randperm(len(group), generator=generator)[:k].tolist())
    train = [t for i, t in enumerate(rest) if i not in val_ids]
    val = [t for i, t in enumerate(rest) if i in val_ids]
    return train, val, test


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    r"""Refuse validation and test shares of speakers that leave none to train on."""
    if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
        raise ValueError(
            f"need val_fraction >= 0, test_fraction >= 0 and val_fraction + test_fraction < 1 (some speakers must be "
            f"left to train on), got {val_fraction} and {test_fraction}"
        )


def split_speech_commands(
    clips: Sequence[SpeechClip], val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
    test_speakers: Sequence[str] | None = None, val_speakers: Sequence[str] | None = None,
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
    check_fractions(val_fraction, test_fraction)
    found = sorted({c.speaker for c in clips if c.speaker is not None})
    for name, named in (("test_speakers", test_speakers), ("val_speakers", val_speakers)):
        unknown = sorted(set(named or ()).difference(found))
        if unknown:
            raise ValueError(
                f"{name} {unknown} have no clips; the {len(found)} speakers found include {some_names(found)} "
                "(a speaker id is the part of a file name before _nohash_)"
            )
    check_disjoint(test_speakers, val_speakers)
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
    splits: dict[str, list[SpeechClip]] = {split: [] for split in SPLITS}
    for i, clip in enumerate(clips):
        split = silent_where.get(i, "train") if clip.speaker is None else where[clip.speaker]
        splits[split].append(clip)
    return splits


def split_official(folder: Path, val_fraction: float, test_fraction: float, seed: int) -> dict[str, list[SpeechClip]]:
    """The full Speech Commands dataset at ``folder`` split by its official lists, and its background noise cut
    into ``_silence_`` clips split by ``val_fraction`` and ``test_fraction``."""
    splits = full_layout_clips(folder)
    noise_dir = folder / BACKGROUND_FOLDER
    slices = slice_background(noise_dir, FILE_RATE) if noise_dir.is_dir() else []
    for split, clips in split_speech_commands(slices, val_fraction, test_fraction, seed).items():
        splits[split] += clips
    return splits


def split_class_folders(
    folder: Path, val_fraction: float, test_fraction: float, seed: int, test_ids: list[str] | None,
    val_ids: list[str] | None, test_root: str | Path | None,
) -> dict[str, list[SpeechClip]]:
    """The clips of the class folders at ``folder`` split by speaker (:func:`split_speech_commands`), or with
    ``test_root``, every clip there the test set and ``folder``'s clips train or validation."""
    clips = scan_class_folders(folder)
    if test_root is None:
        return split_speech_commands(clips, val_fraction, test_fraction, seed, test_ids, val_ids)
    test_root = Path(test_root).expanduser()
    if not is_class_folder(test_root):
        raise FileNotFoundError(
            f"test_root {test_root} is not a folder of class folders: it must hold {SILENCE}/ or {UNKNOWN}/ "
            f"and the keyword folders, like {TEST_SET_FOLDER}/ itself"
        )
    test = scan_class_folders(test_root)
    shared = sorted(str(s) for s in {c.speaker for c in test} & {c.speaker for c in clips} - {None})
    if shared:
        raise ValueError(
            f"test_root {test_root} shares {len(shared)} speakers with root {folder} ({some_names(shared, 5)}): every "
            "speaker must be in one split only. Remove their clips from one of the folders, or drop test_root "
            "and let test_fraction or test_speakers hold speakers out of root"
        )
    splits = split_speech_commands(clips, val_fraction, 0.0, seed, val_speakers=val_ids)
    splits["test"] = test
    return splits


def speaker_rule(
    official: bool, val_fraction: float, test_fraction: float, seed: int, test_root: str | Path | None,
    test_speakers: object, val_speakers: object, named: dict[str, list[str] | None],
) -> str:
    """How a Speech Commands DataModule splits (one line of its summary): the official lists, or speakers
    held out by ``test_root``, by name (``named``: the ids of each split, else a file is said) or drawn."""
    silence = f"_silence_ clips: {val_fraction:.0%} validation"
    if official:
        return f"the official lists (speakers disjoint); {silence}, {test_fraction:.0%} test, seed {seed}"

    def listed(split: str, given: object) -> str:
        ids = named.get(split)
        return f"listed in {given}" if ids is None else some_names(ids, 5)

    if test_root is not None:
        test = f"every clip of {Path(test_root).expanduser()} is the test set"
    elif test_speakers is not None:
        test = f"test speakers {listed('test', test_speakers)}"
    else:
        test = f"{test_fraction:.0%} of speakers test"
    val = (f"{val_fraction:.0%} of speakers validation" if val_speakers is None
           else f"validation speakers {listed('val', val_speakers)}")
    share = "" if test_root is not None else f", {test_fraction:.0%} test"
    return f"speakers disjoint: {test}, {val}, seed {seed}; {silence}{share}"


def draw_speakers(speakers: Sequence[str], fraction: float, seed: int | Sequence[int], name: str) -> set[str]:
    """The ``fraction`` of ``speakers`` (rounded to the nearest count) drawn with ``seed``, held out; at least
    one speaker is left (``name``: the fraction's argument, for the error).

    Examples:
        >>> sorted(draw_speakers(["a", "b", "c", "d"], 0.5, 0, "val_fraction"))
        ['a', 'c']
    """
    order = np.random.default_rng(seed).permutation(len(speakers))
    n = math.floor(fraction * len(speakers) + 0.5)
    if n and n == len(speakers):
        raise ValueError(f"{name}={fraction} keeps all {len(speakers)} speakers out of training")
    return {speakers[k] for k in order[:n]}
