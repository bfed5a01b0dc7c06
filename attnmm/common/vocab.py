r"""A vocabulary built from the training split: token <-> id with padding and an unknown token."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from attnmm._checks import check_nonneg_int

#: Id of the padding token in every :class:`Vocabulary`.
PAD = 0
#: Id of the unknown token in every :class:`Vocabulary`.
UNK = 1

__all__ = ["PAD", "UNK", "Vocabulary"]


class Vocabulary:
    r"""A token <-> id map built from training data only, with padding (id 0) and unknown (id 1).

    Tokens are ranked by frequency (ties by first appearance), those seen at least ``min_freq``
    times are kept, and at most ``max_size`` ids are used in all (the two special ones included),
    so ``len(vocab) <= max_size`` and an embedding table of ``max_size`` rows always fits. Any token
    not kept, e.g. one that only occurs in the validation or test split, maps to :data:`UNK`.

    Args:
        tokens (Iterable[str]): the training tokens, with repeats (their counts rank the vocabulary).
        max_size (int, optional): most ids, specials included; :obj:`None` keeps every token.
            (default: :obj:`None`)
        min_freq (int, optional): fewest occurrences for a token to be kept. (default: :obj:`1`)
        specials (tuple[str, str], optional): the names of the padding and unknown tokens.
            (default: :obj:`("<pad>", "<unk>")`)

    Examples:
        >>> vocab = Vocabulary("the cat saw the dog".split())
        >>> len(vocab), vocab.encode(["the", "cow"])
        (6, [2, 1])
        >>> vocab.decode([2, 3, 1])
        ['the', 'cat', '<unk>']
        >>> Vocabulary.from_state(vocab.state()) == vocab
        True
    """

    def __init__(
        self,
        tokens: Iterable[str],
        max_size: int | None = None,
        min_freq: int = 1,
        specials: tuple[str, str] = ("<pad>", "<unk>"),
    ) -> None:
        min_freq = check_nonneg_int("min_freq", min_freq, minimum=1)
        if max_size is not None:
            check_nonneg_int("max_size", max_size, minimum=len(specials))
        if len(specials) != 2 or len(set(specials)) != 2:
            raise ValueError(f"specials must name two different tokens (padding, unknown), got {specials!r}")
        counts = Counter(tokens)  # keeps first-appearance order among equal counts
        ranked = [t for t, c in sorted(counts.items(), key=lambda tc: -tc[1]) if c >= min_freq and t not in specials]
        if max_size is not None:
            ranked = ranked[: max_size - len(specials)]
        self.itos: list[str] = [*specials, *ranked]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def from_state(cls, itos: Sequence[str]) -> Vocabulary:
        """The vocabulary whose id ``i`` is ``itos[i]`` (as saved by :meth:`state`)."""
        if len(itos) < 2:
            raise ValueError(f"a saved vocabulary lists at least the two special tokens, got {list(itos)!r}")
        vocab = cls([], specials=(itos[PAD], itos[UNK]))
        vocab.itos = list(itos)
        vocab.stoi = {t: i for i, t in enumerate(vocab.itos)}
        return vocab

    def state(self) -> list[str]:
        """The tokens in id order: all that is needed to rebuild the vocabulary."""
        return list(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def __hash__(self) -> int:
        return hash(tuple(self.itos))

    def index(self, token: str) -> int:
        """The id of ``token``, :data:`UNK` when it is not in the vocabulary."""
        return self.stoi.get(token, UNK)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """The ids of ``tokens``."""
        return [self.stoi.get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The tokens of ``ids``."""
        return [self.itos[i] for i in ids]

    def __repr__(self) -> str:
        shown = ", ".join(repr(t) for t in self.itos[2:6]) + (", ..." if len(self.itos) > 6 else "")
        return f"Vocabulary(size={len(self)}, tokens=[{shown}])"
