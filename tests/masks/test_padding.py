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


@pytest.mark.parametrize(
    "lengths,bad",
    [([10.0, 5.5], "float 10.0"), ((10, 5.5), "float 5.5"), ([10, 5.0], "float 5.0"), ([True, 2], "bool True")],
)
def test_lengths_that_are_not_whole_numbers_are_refused(lengths: object, bad: str) -> None:
    """A list or tuple of lengths holding anything but ints is refused, never rounded (a float tensor too)."""
    with pytest.raises(TypeError, match=rf"lengths must be whole numbers \(ints\) of shape \(B,\), got {bad}"):
        Padding(lengths)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer tensor"):
        Padding(torch.tensor([10.0, 5.5]))


def test_whole_number_lengths_in_every_form() -> None:
    import numpy as np

    for lengths in ([3, 1], (3, 1), range(3, 0, -2), np.array([3, 1]), [np.int64(3), 1], [torch.tensor(3), 1]):
        assert Padding(lengths).lengths.tolist() == [3, 1]  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"whole numbers \(ints\) of shape \(B,\), got float64 3.5"):
        Padding(np.array([3.5, 1.0]))  # type: ignore[arg-type]
