from __future__ import annotations

import pytest
import torch

from attnmm.masks import Padding


def test_semantics() -> None:
    m = Padding(torch.tensor([2, 0, 4]))
    dense = m.dense(3, 4)
    assert dense.shape == (3, 3, 4)
    j = torch.arange(4)
    for b, n in enumerate([2, 0, 4]):
        assert torch.equal(dense[b], (j < n).expand(3, 4))
    assert m.nnz(3, 4) == 3 * (2 + 0 + 4)
    assert m.structure.batched and m.structure.kind == "interval"


def test_repr_truncates() -> None:
    assert repr(Padding([1, 2])) == "Padding(lengths=[1, 2])"
    assert repr(Padding(list(range(10)))) == "Padding(lengths=[0, 1, 2, 3, 4, 5, ...])"


def test_lengths_longer_than_keys() -> None:
    with pytest.raises(ValueError, match=r"lengths must be <= S=3 .* got max length 5"):
        Padding([5, 1]).dense(2, 3)


def test_batch_size_mismatch() -> None:
    with pytest.raises(ValueError, match="built for a batch of 2 items but the input has batch size 3"):
        Padding([1, 2]).dense(2, 3, batch_size=3)


def test_bad_lengths() -> None:
    with pytest.raises(ValueError, match="lengths must be >= 0, got min -1"):
        Padding([-1, 2])
    with pytest.raises(TypeError, match="integer tensor"):
        Padding(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"shape \(B,\), got shape \(2, 1\)"):
        Padding(torch.tensor([[1], [2]]))
