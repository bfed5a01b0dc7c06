r"""Google Speech Commands v0.02: one-second spoken commands, 16 kHz mono WAV.

Two folder layouts are read: the full dataset with its official split lists, and the 12 class
folders of the standard keyword-spotting task (the v0.02 test companion set), split here with speakers
disjoint across train, validation and test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from torch import Tensor, nn

from attnmm.data import _scan, _speakers
from attnmm.data._audio import AudioClips, AudioDataModule
from attnmm.data._root import data_dir
from attnmm.data._scan import (
    CORE_COMMANDS,
    DIGIT_WORDS,
    FILE_RATE,
    SILENCE,
    UNKNOWN,
    SpeechClip,
    digit_voices,
    download_speech_commands,
    scan_class_folders,
    scan_speech_commands,
    slice_background,
)
from attnmm.data._speakers import read_speakers, split_speech_commands
from attnmm.data.augment import noise_takers, set_noise_bank

__all__ = ["CORE_COMMANDS", "DIGIT_WORDS", "SILENCE", "SpeechClip", "SpeechCommandsDataModule", "UNKNOWN",
           "digit_voices", "download_speech_commands", "scan_class_folders", "scan_speech_commands", "slice_background",
           "split_speech_commands"]


class SpeechCommandsDataModule(AudioDataModule):
    r"""Google Speech Commands v0.02 (Warden, 2018): keyword spotting on one-second 16 kHz clips.

    Two layouts (``layout``): ``"full"``, the release as torchaudio lays it out, split by its own lists
    (:func:`scan_speech_commands`), and ``"classes"``, the 12 class folders of the test companion set,
    split here with every speaker in one split (:func:`split_speech_commands`, or ``test_root`` as the
    test set). ``"auto"`` picks the one it finds under ``root`` (``None``: ``$ATTNMM_DATA``, then
    ``~/.cache/attnmm``), else downloads (``download=True``) or says where to put it. The layouts, the
    speaker-disjoint protocol and the search order: the speech recipe page (docs/recipes/speech.md).

    Classes, in this order: ``labels`` (default: the ten core commands yes, no, up, down, left, right,
    on, off, stop, go), then ``_unknown_`` (``include_unknown``: every other word) and ``_silence_``
    (``include_silence``). Both default to on in the ``"classes"`` layout (the 12-class task) and off in
    the ``"full"`` layout (the ten commands). Clips of a class left out are dropped. In YAML configs
    quote the words: unquoted ``yes``, ``no``, ``on`` and ``off`` are read as booleans.

    ``noise_augment`` applies to training batches only; its noise bank is the training split's
    ``_silence_`` clips (:meth:`train_noise`). Clips are read when a batch needs them, padded per batch.

    Batches are :class:`~attnmm.data.AudioBatch` dicts at ``sample_rate`` (every clip resampled from the
    files' 16 kHz when it differs, e.g. 8000 to pretrain for FSDD); the split sets are
    :class:`~attnmm.data.AudioClips` with each clip's speaker, reported by :meth:`summary` and the ``repr``.

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
        self, root: str | Path | None = None, batch_size: int = 64, num_workers: int = 0,
        labels: list[str] | None = None, include_unknown: bool | None = None, download: bool = False,
        layout: Literal["auto", "full", "classes"] = "auto", include_silence: bool | None = None,
        val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
        test_speakers: list[str] | str | None = None, val_speakers: list[str] | str | None = None,
        test_root: str | Path | None = None, noise_augment: nn.Module | None = None, sample_rate: int = FILE_RATE,
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
        _speakers.check_fractions(val_fraction, test_fraction)
        if test_root is not None and test_speakers is not None:
            raise ValueError(
                "pass test_root or test_speakers, not both: with test_root every clip under it is the test set"
            )
        for name, given in (("test_speakers", test_speakers), ("val_speakers", val_speakers)):
            if isinstance(given, (list, tuple)):  # a file is read in setup
                read_speakers(given, name)
        if isinstance(test_speakers, (list, tuple)) and isinstance(val_speakers, (list, tuple)):
            _speakers.check_disjoint(test_speakers, val_speakers)
        if noise_augment is not None and not noise_takers(noise_augment):
            raise ValueError(
                f"noise_augment {type(noise_augment).__name__} has no module that takes noise clips (set_noise); "
                "use attnmm.data.BackgroundNoise (alone or in a ChainAugment)"
            )
        self.root, self.batch_size, self.num_workers, self.labels = root, batch_size, num_workers, words
        self.include_unknown, self.include_silence, self.download, self.layout = (
            include_unknown, include_silence, download, layout)
        self.val_fraction, self.test_fraction, self.seed = val_fraction, test_fraction, seed
        # a list is kept as a list; a file is read in setup
        self.test_speakers = list(test_speakers) if isinstance(test_speakers, (list, tuple)) else test_speakers
        self.val_speakers = list(val_speakers) if isinstance(val_speakers, (list, tuple)) else val_speakers
        self.test_root, self.noise_augment, self.sample_rate = test_root, noise_augment, sample_rate
        self._found: tuple[str, Path] | None = None
        self._splits: dict[str, list[SpeechClip]] | None = None
        self._held_out: dict[str, list[str] | None] = {}
        self._noise: list[Tensor] | None = None
        self.train_set = self.val_set = self.test_set = None

    # ------------------------------------------------------------------ where the data is

    def _find(self) -> tuple[str, Path] | None:
        """``(layout, folder)`` of the data found, without downloading; None when there is none."""
        if self._found is None:
            self._found = _scan.find_speech_commands(data_dir(self.root), self.layout)
        return self._found

    @property
    def dataset_layout(self) -> str:
        r"""The layout of the data found, ``"full"`` or ``"classes"`` (``layout`` unless it is ``"auto"``)."""
        found = self._find()
        return found[0] if found is not None else "classes" if self.layout == "classes" else "full"

    @property
    def dataset_dir(self) -> Path:
        r"""The folder read: ``<root>/SpeechCommands/speech_commands_v0.02`` (``"full"``) or the folder that
        holds the class folders (``"classes"``)."""
        found, base = self._find(), data_dir(self.root)
        if found is not None:
            return found[1]
        if self.layout == "classes":
            return base if self.root is not None else base / _scan.TEST_SET_FOLDER
        return base / _scan.FOLDER_IN_ARCHIVE / _scan.VERSION

    def _locate(self) -> tuple[str, Path]:
        if self._find() is None:  # downloads (the full layout) or says where to put the data
            self._found = _scan.locate_speech_commands(data_dir(self.root), self.layout,
                                                 download_speech_commands if self.download else None)
        return self._found  # type: ignore[return-value]

    # ------------------------------------------------------------------ classes

    def _on(self, include: bool | None) -> bool:
        return self.dataset_layout == "classes" if include is None else include

    @property
    def class_names(self) -> tuple[str, ...]:
        r"""The class of each label index: the words, then ``_unknown_`` and ``_silence_`` when included."""
        return (*self.labels, *(c for c, on in ((UNKNOWN, self.include_unknown), (SILENCE, self.include_silence))
                                if self._on(on)))

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _target(self, clip: SpeechClip) -> int | None:
        names, name = self.class_names, clip.word if clip.word in (SILENCE, *self.labels) else UNKNOWN
        return names.index(name) if name in names else None  # None: a class left out

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
                    f"root= at a folder of class folders ({_scan.TEST_SET_FOLDER})"
                )
            return _speakers.split_official(folder, self.val_fraction, self.test_fraction, self.seed)
        test_ids = read_speakers(self.test_speakers, "test_speakers")
        val_ids = read_speakers(self.val_speakers, "val_speakers")
        self._held_out = {"test": test_ids, "val": val_ids}
        return _speakers.split_class_folders(
            folder, self.val_fraction, self.test_fraction, self.seed, test_ids, val_ids, self.test_root
        )

    def setup(self, stage: str | None = None) -> None:
        if self._splits is None:
            splits = self._make_splits()
            silence = self._on(self.include_silence)
            _scan.check_words(splits, self.labels, silence, self.dataset_dir, self.dataset_layout)
            self._splits = splits
        if stage in (None, "fit", "validate") and self.train_set is None:
            self.train_set, self.val_set = self._clips("train"), self._clips("val")
            if self.noise_augment is not None:
                set_noise_bank(self.noise_augment, self.train_noise(), f"the training split of {self.dataset_dir} "
                               f"has no {SILENCE} clips (or {_scan.BACKGROUND_FOLDER} recordings)")
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self._clips("test")

    def _kept(self, split: str) -> list[tuple[SpeechClip, int]]:
        if self._splits is None:
            raise RuntimeError("the splits are made in setup(); call dm.setup() first")
        return [(c, t) for c in self._splits[split] if (t := self._target(c)) is not None]

    def _clips(self, split: str) -> AudioClips:
        kept = self._kept(split)
        return AudioClips([c.path for c, _ in kept], [t for _, t in kept], self.sample_rate,
                          speakers=[c.speaker for c, _ in kept], spans=[c.span for c, _ in kept], file_rate=FILE_RATE)

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
            split: sorted({c.speaker for c, _ in self._kept(split) if c.speaker is not None}) for split in _scan.SPLITS
        }

    # ------------------------------------------------------------------ reports

    def _sizes(self) -> dict[str, tuple[int, int, int]]:
        """split -> (clips, speakers, silence clips) of the classes kept."""
        kept, speakers = {split: self._kept(split) for split in _scan.SPLITS}, self.split_speakers
        return {s: (len(k), len(speakers[s]), sum(c.word == SILENCE for c, _ in k)) for s, k in kept.items()}

    def __repr__(self) -> str:
        sizes = ""
        if self._splits is not None:
            sizes = "".join(f", {k}={n} ({_speakers.plural(s, 'speaker')})" for k, (n, s, _) in self._sizes().items())
        return (
            f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, layout={self.dataset_layout!r}, "
            f"classes={self.num_classes}, batch_size={self.batch_size}{sizes})"
        )

    def _rule(self) -> str:
        named = {split: self._held_out.get(split) or (given if isinstance(given, list) else None)
                 for split, given in (("test", self.test_speakers), ("val", self.val_speakers))}
        return _speakers.speaker_rule(
            self.dataset_layout == "full", self.val_fraction, self.test_fraction, self.seed, self.test_root,
            self.test_speakers, self.val_speakers, named,
        )

    def summary(self) -> str:
        r"""A few lines on the data found, the classes and the split (complete after :meth:`setup`)."""
        resampled = "" if self.sample_rate == FILE_RATE else f" (resampled from {FILE_RATE} Hz)"
        lines = [
            f"Speech Commands v0.02 at {self.dataset_dir} (layout {self.dataset_layout!r})",
            f"  {self.sample_rate} Hz mono{resampled}, {self.num_classes} classes: "
            + ", ".join(self.class_names),
            f"  split: {self._rule()}",
        ]
        if self._splits is not None:
            lines.insert(2, f"  {sum(n for n, _, _ in self._sizes().values())} clips of {len(self.speakers)} speakers")
            lines += [
                f"  {split}: {_speakers.plural(n, 'clip')}, {_speakers.plural(s, 'speaker')}, {q} {SILENCE}"
                for split, (n, s, q) in self._sizes().items()
            ]
            if self.noise_augment is not None:
                count = sum(c.word == SILENCE for c in self._splits["train"])
                lines.append(f"  noise augmentation on training batches, from the {count} training noise clips")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
