r"""Reading CoNLL-U treebank files (with ``conllu``) into sentences of words and their per-word columns,
refusing a truncated or corrupt file by name and line."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import conllu

__all__ = ["UPOS_TAGS", "Sentence", "read_conllu"]

#: The 17 universal part-of-speech tags (https://universaldependencies.org/u/pos/), in label order.
UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)  # fmt: skip


@dataclass(frozen=True)
class Sentence:
    r"""One sentence: its word forms and their UPOS tags, with the other per-word columns that can
    serve as auxiliary targets (``"_"`` where the treebank gives none): language-specific tags
    (XPOS), dependency relations (DEPREL) and morphological features (FEATS, one string).
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    xpos: tuple[str, ...] = ()
    deprel: tuple[str, ...] = ()
    feats: tuple[str, ...] = ()


def read_conllu(path: str | Path) -> list[Sentence]:
    r"""The sentences of a CoNLL-U file: words, UPOS tags, and the XPOS, DEPREL and FEATS columns.

    Multiword-token lines (ID ``3-4``) and empty nodes (ID ``8.1``) are skipped: one tag per
    syntactic word, as the UPOS column defines it.

    Args:
        path (str or Path): a ``.conllu`` file.

    Raises:
        ValueError: the file is truncated or corrupt (not UTF-8, a token line without the 10
            tab-separated fields, no blank line after the last sentence), or a word has a tag outside
            :data:`UPOS_TAGS`; the message names the file and the line or sentence.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (bad byte at offset {err.start}): {_CORRUPT}") from err
    _check_complete(path, text)
    sentences: list[Sentence] = []
    for sent in conllu.parse_incr(io.StringIO(text)):
        words = [t for t in sent if isinstance(t["id"], int)]
        if not words:
            continue
        tags = tuple(t["upos"] for t in words)
        bad = [tag for tag in tags if tag not in UPOS_TAGS]
        if bad:
            raise ValueError(
                f"{path}: sentence {sent.metadata.get('sent_id', len(sentences))} has UPOS tags {bad} "
                f"outside the 17 universal tags {UPOS_TAGS}"
            )
        sentences.append(
            Sentence(
                tuple(t["form"] for t in words),
                tags,
                xpos=tuple(t["xpos"] or "_" for t in words),
                deprel=tuple(t["deprel"] or "_" for t in words),
                feats=tuple("|".join(f"{k}={v}" for k, v in (t["feats"] or {}).items()) or "_" for t in words),
            )
        )
    return sentences


_CORRUPT = (
    "the file is truncated or corrupt (an interrupted download or copy?); download it again from the "
    "treebank's release (e.g. https://github.com/UniversalDependencies/UD_English-EWT)"
)


def _check_complete(path: str | Path, text: str) -> None:
    """Raise ``ValueError`` naming the file and line when ``text`` is not complete CoNLL-U: every token
    line has 10 tab-separated fields and every sentence, the last one too, ends with a blank line."""
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if line and not line.startswith("#") and line.count("\t") != 9:
            raise ValueError(
                f"{path}, line {number}: a token line has {line.count(chr(9)) + 1} tab-separated fields, "
                f"CoNLL-U has 10 ({line[:60]!r}); {_CORRUPT}"
            )
    if text.strip() and not text.replace("\r\n", "\n").endswith("\n\n"):
        raise ValueError(
            f"{path} ends inside a sentence (line {len(lines) - (text.endswith(chr(10)))}: no blank line "
            f"after the last sentence); {_CORRUPT}"
        )
