from __future__ import annotations

from attnmm.masks import Causal, Full


def test_full() -> None:
    m = Full()
    assert repr(m) == "Full()"
    assert m.structure.kind == "full"
    assert m.nnz(3, 5) == 15
    assert m.density(3, 5) == 1.0
    assert bool(m.dense(2, 3).all())


def test_causal() -> None:
    m = Causal()
    assert repr(m) == "Causal()"
    assert m.structure.kind == "causal"
    # top-left aligned like SDPA's is_causal when L != S
    assert m.picture(2, 4) == "1 0 0 0\n1 1 0 0"
    assert m.picture(4, 2) == "1 0\n1 1\n1 1\n1 1"
    assert m.nnz(4, 2) == 7
