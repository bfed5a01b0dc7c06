r"""Universal Dependencies treebanks for part-of-speech tagging (UPOS), read with ``conllu``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from attnmm.common.vocab import PAD, UNK, Vocabulary
from attnmm.data._conllu import UPOS_TAGS, Sentence, read_conllu
from attnmm.data._resumable import ResumableDataLoader, SplitLoaders
from attnmm.data._root import DATA_ENV, resolve_root

IGNORE_INDEX = -100
#: The CoNLL-U columns :class:`UDPOSDataModule` can add to batches as auxiliary targets.
AUX_COLUMNS = ("xpos", "deprel", "feats")

__all__ = ["AUX_COLUMNS", "UPOS_TAGS", "Sentence", "UDPOSDataModule", "read_conllu"]


def _clip_word(word: str, max_len: int) -> str:
    """The word, or its first and last ``max_len // 2`` characters when it is longer (suffixes tag)."""
    if len(word) <= max_len:
        return word
    head = max_len // 2
    return word[:head] + word[len(word) - (max_len - head) :]


class TaggedSentences(Dataset):
    r"""Encoded sentences: items ``(word_ids (L,), char_ids (L, C), tag_ids (L,))``, followed by
    the ids of each auxiliary column kept (one (L,) tensor each).

    With ``unk_probs`` (one (L,) tensor per sentence) each word id is replaced by the unknown id
    with its own probability every time the sentence is drawn (training-time word dropout).
    """

    def __init__(self, items: list[tuple[Tensor, ...]], unk_probs: list[Tensor] | None = None) -> None:
        if unk_probs is not None and len(unk_probs) != len(items):
            raise ValueError(f"need one unk_probs tensor per sentence, got {len(unk_probs)} for {len(items)}")
        self.items = items
        self.unk_probs = unk_probs
        self.lengths = [len(item[0]) for item in items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Tensor, ...]:
        if self.unk_probs is None:
            return self.items[i]
        words, *rest = self.items[i]
        drop = torch.rand(words.shape) < self.unk_probs[i]  # the global generator: seeded, resumable
        return (words.masked_fill(drop, UNK), *rest)


def collate_tagged(items: Sequence[tuple[Tensor, ...]], aux_columns: Sequence[str] = ()) -> dict[str, Tensor]:
    r"""Pad encoded sentences into a batch: ``tokens`` (B, L), ``chars`` (B, L, C), ``lengths`` (B,)
    and ``tags`` (B, L) with -100 after each sentence's end; also one (B, L) entry per auxiliary
    column, named by ``aux_columns``, when the items carry their ids."""
    if items and len(items[0]) != 3 + len(aux_columns):
        raise ValueError(f"items have {len(items[0]) - 3} auxiliary columns, named {list(aux_columns)}")
    def padded(k: int, value: int) -> Tensor:  # (B, L): the k-th entry of every item
        return pad_sequence([item[k] for item in items], batch_first=True, padding_value=value)

    tokens, labels = padded(0, PAD), [padded(k, IGNORE_INDEX) for k in range(2, len(items[0]))]  # tags, aux...
    chars = torch.full((*tokens.shape, max(item[1].size(1) for item in items)), PAD, dtype=torch.long)  # (B, L, C)
    for b, (w, c, *_) in enumerate(items):
        chars[b, : len(w), : c.size(1)] = c
    lengths = torch.tensor([len(item[0]) for item in items], dtype=torch.long)
    return {"tokens": tokens, "chars": chars, "lengths": lengths, **dict(zip(("tags", *aux_columns), labels))}


class BucketSampler(BatchSampler):
    r"""Batches of sentences of similar length: shuffle, sort pools of ``pool`` batches by length,
    cut them into batches and shuffle the batches (less padding, still random).

    A ``BatchSampler`` whose ``sampler`` argument Lightning can replace under DDP: with a
    ``DistributedSampler`` there, each process buckets and shuffles its own share of the sentences.
    """

    def __init__(
        self, lengths: Sequence[int], batch_size: int, pool: int = 50, seed: int = 0,
        sampler: Sampler[int] | None = None,
    ) -> None:
        super().__init__(sampler if sampler is not None else range(len(lengths)), batch_size, drop_last=False)
        self.lengths, self.pool, self.seed = list(lengths), pool, seed
        self.epoch = 0

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        self.epoch += 1
        indices = list(self.sampler)  # every sentence, or under DDP this process's share
        order = [indices[i] for i in torch.randperm(len(indices), generator=generator).tolist()]
        span = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), span):
            chunk = sorted(order[start : start + span], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        for i in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[i]

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, int]:
        """The epoch count, which seeds the next epoch's order (saved by a ResumableDataLoader)."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])


class UDPOSDataModule(SplitLoaders):
    r"""Universal part-of-speech tagging (17 UPOS tags) on a Universal Dependencies treebank,
    by default the English Web Treebank (UD_English-EWT).

    Files ``<prefix>-ud-{train,dev,test}.conllu`` are read from ``<root>/<treebank>``
    (:func:`~attnmm.data.resolve_root`). The train file is trained on and the dev file validates. The
    test set is the test file when it is there, else the dev file; :attr:`test_split` says which, and
    :meth:`setup` prints it. With ``holdout=n`` the last ``n`` sentences of the train file validate
    instead (and are left out of training and of the vocabularies), so that choices can be made
    without looking at the dev file when the dev file is the test set.

    Vocabularies (:class:`~attnmm.data.Vocabulary`) are built from the training split only: words
    (lower-cased by default) and characters (case kept), each with padding (0) and unknown (1)
    ids, capped at ``max_words`` and ``max_chars`` ids so that an adapter built with those sizes
    always fits. They are saved in checkpoints (:meth:`state_dict`).

    Batches are :func:`collate_tagged`'s; training batches group sentences of similar length. Each
    column of ``aux_columns`` adds a (B, L) entry of that name, the column's labels as ids of a
    training-split vocabulary (-100 if unseen in training): targets for auxiliary heads
    (``MultiClass(aux_heads={"xpos": ...})``), e.g. EWT's finer XPOS classes supervising UPOS.

    Args:
        root (str or Path, optional): the base data folder. (default: :obj:`None`)
        treebank (str, optional): the treebank's folder under the root. (default: :obj:`"ud_english_ewt"`)
        prefix (str, optional): the file-name prefix. (default: :obj:`"en_ewt"`)
        batch_size (int, optional): sentences per batch. (default: ``32``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        max_words (int, optional): most word ids, specials included. (default: ``20000``)
        min_word_freq (int, optional): fewest training occurrences of a kept word. (default: ``1``)
        max_chars (int, optional): most character ids, specials included. (default: ``200``)
        max_word_len (int, optional): characters kept per word (the first and the last halves).
            (default: ``20``)
        lowercase (bool, optional): lower-case the words (not the characters). (default: :obj:`True`)
        seed (int, optional): seed of the batch order. (default: ``0``)
        holdout (int, optional): validate on the last ``holdout`` training sentences instead of the
            dev file; ``0`` validates on dev. (default: ``0``)
        unk_replace (float, optional): :math:`\alpha` of frequency-scaled word dropout ("Simple and
            Accurate Dependency Parsing Using Bidirectional LSTM Feature Representations",
            Kiperwasser and Goldberg, 2016): in training batches a word seen :math:`c` times in the
            training split is replaced by the unknown id with probability
            :math:`\alpha / (\alpha + c)`, so rare words, the ones most like unseen words, teach the
            model to tag from characters and context, while frequent words keep their embeddings.
            ``0`` turns it off. (default: ``0.0``)
        aux_columns (Sequence[str], optional): CoNLL-U columns added to the batches as auxiliary
            targets, from ``"xpos"``, ``"deprel"`` and ``"feats"``. (default: ``()``)
        max_aux_classes (int, optional): most ids of each auxiliary column, the two unused special
            ids included: the auxiliary heads' number of classes (EWT has 49 XPOS tags, 51
            relations and 230 feature strings). (default: ``64``)

    Examples:
        >>> dm = UDPOSDataModule(root="/data")
        >>> dm
        UDPOSDataModule(root='/data/ud_english_ewt', batch_size=32)
        >>> dm.num_classes
        17
    """

    num_classes: int = len(UPOS_TAGS)
    class_names: tuple[str, ...] = UPOS_TAGS

    def __init__(
        self, root: str | Path | None = None, treebank: str = "ud_english_ewt", prefix: str = "en_ewt",
        batch_size: int = 32, num_workers: int = 0, max_words: int = 20000, min_word_freq: int = 1,
        max_chars: int = 200, max_word_len: int = 20, lowercase: bool = True, seed: int = 0, holdout: int = 0,
        unk_replace: float = 0.0, aux_columns: Sequence[str] = (), max_aux_classes: int = 64,
    ) -> None:
        super().__init__()
        if not (unk_replace >= 0.0 and math.isfinite(unk_replace)):
            raise ValueError(f"unk_replace must be a finite alpha >= 0, got {unk_replace}")
        self.unk_replace = float(unk_replace)
        bad = [c for c in aux_columns if c not in AUX_COLUMNS]
        if bad or len(set(aux_columns)) != len(aux_columns):
            raise ValueError(f"aux_columns must be distinct names from {AUX_COLUMNS}, got {list(aux_columns)}")
        self.aux_columns, self.max_aux_classes = tuple(aux_columns), max_aux_classes
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"need batch_size >= 1 and num_workers >= 0, got {batch_size} and {num_workers}")
        if holdout < 0:
            raise ValueError(f"holdout must be >= 0 sentences, got {holdout}")
        self.holdout = holdout
        if max_word_len < 2:
            raise ValueError(f"max_word_len must be >= 2, got {max_word_len}")
        self.root, self.treebank, self.prefix = root, treebank, prefix
        self.batch_size, self.num_workers = batch_size, num_workers
        self.max_words, self.min_word_freq, self.max_chars = max_words, min_word_freq, max_chars
        self.max_word_len, self.lowercase, self.seed = max_word_len, lowercase, seed
        self.words: Vocabulary | None = None  # built in setup, or restored from a checkpoint
        self.chars: Vocabulary | None = None
        self.aux_vocabs: dict[str, Vocabulary] = {}
        self.test_split: str | None = None
        self.datasets: dict[str, TaggedSentences] = {}

    @property
    def dataset_dir(self) -> Path:
        r"""``<root>/<treebank>``."""
        return resolve_root(self.root, self.treebank)

    def path(self, split: str) -> Path:
        r"""The CoNLL-U file of ``split`` (``"train"``, ``"dev"`` or ``"test"``)."""
        return self.dataset_dir / f"{self.prefix}-ud-{split}.conllu"

    def _require(self, split: str) -> Path:
        path = self.path(split)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found. Put the treebank's {self.prefix}-ud-train.conllu and "
                f"{self.prefix}-ud-dev.conllu (e.g. from https://github.com/UniversalDependencies/UD_English-EWT) "
                f"in {self.dataset_dir}, or point root= or ${DATA_ENV} at the folder holding {self.treebank}/"
            )
        return path

    def prepare_data(self) -> None:
        self._require("train")
        self._require("dev")

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        train = read_conllu(self._require("train"))
        held_out = None
        if self.holdout:
            if self.holdout >= len(train):
                raise ValueError(
                    f"holdout={self.holdout} leaves no training sentences: {self.path('train')} has {len(train)}"
                )
            train, held_out = train[: -self.holdout], train[-self.holdout :]
        if self.words is None or self.chars is None:  # not restored from a checkpoint
            self.words = Vocabulary((self._word(w) for s in train for w in s.words), self.max_words, self.min_word_freq)
            self.chars = Vocabulary((c for s in train for w in s.words for c in w), self.max_chars)
        for column in self.aux_columns:
            if column not in self.aux_vocabs:
                self.aux_vocabs[column] = vocab = Vocabulary(t for s in train for t in getattr(s, column))
                if len(vocab) > self.max_aux_classes:
                    raise ValueError(
                        f"the training split has {len(vocab) - 2} {column} labels, more than "
                        f"max_aux_classes={self.max_aux_classes} ids (two are reserved) allow: raise "
                        "max_aux_classes and the auxiliary head's num_classes with it"
                    )
        self.test_split = "test" if self.path("test").is_file() else "dev"
        dev = read_conllu(self._require("dev"))
        test = dev if self.test_split == "dev" else read_conllu(self.path("test"))
        val = dev if held_out is None else held_out
        self.datasets = {"train": self._encode(train, self.unk_replace), "val": self._encode(val)}
        self.datasets["test"] = self._encode(test)
        self._say_test_split()

    @rank_zero_only
    def _say_test_split(self) -> None:
        source = self.path(self.test_split or "dev").name
        note = "" if self.test_split == "test" else f" ({self.path('test').name} not found: testing on dev)"
        train, val = self.path("train").name, self.path("dev").name
        if self.holdout:
            train, val = f"{train} but its last {self.holdout} sentences", f"those {self.holdout} sentences"
        print(f"UD tagging: train {train}, validation {val}, test {source}{note}")

    def _word(self, word: str) -> str:
        return word.lower() if self.lowercase else word

    def _encode(self, sentences: list[Sentence], unk_replace: float = 0.0) -> TaggedSentences:
        assert self.words is not None and self.chars is not None
        tag_ids = {t: i for i, t in enumerate(UPOS_TAGS)}
        unk_probs: list[Tensor] | None = None
        if unk_replace > 0.0:  # counts from the sentences themselves: the training split
            counts = Counter(self._word(w) for s in sentences for w in s.words)
            unk_probs = [
                torch.tensor([unk_replace / (unk_replace + counts[self._word(w)]) for w in s.words])
                for s in sentences
            ]
        items: list[tuple[Tensor, ...]] = []
        for s in sentences:
            words = torch.tensor(self.words.encode(self._word(w) for w in s.words), dtype=torch.long)
            clipped = [_clip_word(w, self.max_word_len) for w in s.words]
            chars = torch.full((len(clipped), max(map(len, clipped))), PAD, dtype=torch.long)
            for i, w in enumerate(clipped):
                chars[i, : len(w)] = torch.tensor(self.chars.encode(w), dtype=torch.long)
            item: tuple[Tensor, ...] = (words, chars, torch.tensor([tag_ids[t] for t in s.tags], dtype=torch.long))
            for column in self.aux_columns:  # labels unseen in training are not scored
                ids = self.aux_vocabs[column].encode(getattr(s, column))
                item += (torch.tensor([i if i != UNK else IGNORE_INDEX for i in ids], dtype=torch.long),)
            items.append(item)
        return TaggedSentences(items, unk_probs)

    @property
    def _collate(self) -> Callable[[Sequence[tuple[Tensor, ...]]], dict[str, Tensor]]:
        return partial(collate_tagged, aux_columns=self.aux_columns)  # picklable for worker processes

    def _loader(self, split: str, train: bool) -> DataLoader:
        data = self.datasets[split]
        if train:  # batches of similar lengths; resumable mid-epoch: the same batches after a crash and resume
            sampler = BucketSampler(data.lengths, self.batch_size, seed=self.seed)
            return ResumableDataLoader(data, batch_sampler=sampler, collate_fn=self._collate,
                                       num_workers=self.num_workers)
        return DataLoader(data, self.batch_size, collate_fn=self._collate, num_workers=self.num_workers)

    def state_dict(self) -> dict[str, Any]:
        if self.words is None or self.chars is None:
            return {}
        vocabs = {"words": self.words, "chars": self.chars, **self.aux_vocabs}
        return {name: vocab.state() for name, vocab in vocabs.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            self.words = Vocabulary.from_state(state_dict["words"])
            self.chars = Vocabulary.from_state(state_dict["chars"])
            self.aux_vocabs = {c: Vocabulary.from_state(state_dict[c]) for c in AUX_COLUMNS if c in state_dict}

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={len(v)}" for k, v in self.datasets.items())
        return f"{type(self).__name__}(root={self.dataset_dir.as_posix()!r}, batch_size={self.batch_size}{sizes})"
