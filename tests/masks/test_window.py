from __future__ import annotations

import pytest
import torch

from attnmm.masks import Window


def test_semantics() -> None:
    dense = Window(2, 1).dense(6, 6)
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    assert torch.equal(dense, (j >= i - 2) & (j <= i + 1))


def test_repr_structure_and_picture() -> None:
    m = Window(2, 0)
    assert repr(m) == "Window(left=2, right=0)"
    s = m.structure
    assert (s.kind, s.left, s.right, s.batched) == ("band", 2, 0, False)
    assert m.picture(3) == "1 0 0\n1 1 0\n1 1 1"
    assert m.nnz(4) == 9
    assert m.density(4) == pytest.approx(9 / 16)


def test_rectangular() -> None:
    assert Window(0, 1).picture(2, 4) == "1 1 0 0\n0 1 1 0"


@pytest.mark.parametrize("left,right", [(-1, 0), (0, -3)])
def test_negative_sizes_are_refused(left: int, right: int) -> None:
    with pytest.raises(ValueError, match=r"must be an int >= 0, got -"):
        Window(left, right)


def test_non_int_is_refused() -> None:
    with pytest.raises(TypeError, match="left must be an int >= 0, got float 1.5"):
        Window(1.5, 0)  # type: ignore[arg-type]
