from __future__ import annotations

import pytest
import torch

from attnmm.masks import Chunk


def test_semantics_no_lookahead() -> None:
    size, left = 3, 1
    dense = Chunk(size, left).dense(10)
    i, j = torch.meshgrid(torch.arange(10), torch.arange(10), indexing="ij")
    ci, cj = i // size, j // size
    assert torch.equal(dense, (cj <= ci) & (cj >= ci - left))
    assert not torch.any(dense & (cj > ci))  # never a later chunk: streaming is exact


def test_repr_structure_picture() -> None:
    m = Chunk(2, 1)
    assert repr(m) == "Chunk(size=2, left_chunks=1)"
    s = m.structure
    assert (s.kind, s.left, s.right) == ("band", 3, 1)
    assert m.picture(4) == "1 1 0 0\n1 1 0 0\n1 1 1 1\n1 1 1 1"


def test_band_bounds_every_pair() -> None:
    m = Chunk(4, 2)
    p = m.pairs(50)
    left, right = m.structure.left, m.structure.right
    assert left is not None and right is not None
    assert torch.all(p.col >= p.row - left) and torch.all(p.col <= p.row + right)


@pytest.mark.parametrize("size,left,err", [(0, 0, ValueError), (-2, 0, ValueError), (2, -1, ValueError)])
def test_bad_sizes(size: int, left: int, err: type) -> None:
    with pytest.raises(err, match="must be an int >="):
        Chunk(size, left)
