"""Vocabulary: training-split ranking, caps, unknown tokens and saving."""

from __future__ import annotations

import pytest

from attnmm.common.vocab import PAD, UNK, Vocabulary


def test_ranking_caps_and_unknown() -> None:
    vocab = Vocabulary("a b b c c c d".split(), max_size=4)
    assert vocab.itos == ["<pad>", "<unk>", "c", "b"]
    assert vocab.encode(["c", "a", "zzz"]) == [2, UNK, UNK]
    assert Vocabulary("a b b".split(), min_freq=2).itos == ["<pad>", "<unk>", "b"]
    assert vocab.index("<pad>") == PAD


def test_round_trip_and_errors() -> None:
    vocab = Vocabulary("hello world".split())
    assert Vocabulary.from_state(vocab.state()) == vocab
    assert vocab.decode(vocab.encode(["world"])) == ["world"]
    with pytest.raises(ValueError, match="max_size must be an int >= 2, got 1"):
        Vocabulary([], max_size=1)
