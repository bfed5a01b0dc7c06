from __future__ import annotations

import pytest
import torch

from attnmm.masks import Grid


def rc(p: int, w: int) -> tuple[int, int]:
    return p // w, p % w


@pytest.mark.parametrize("kernel,dilation", [(1, 1), (3, 1), (3, 2), (5, 1)])
def test_truncate_is_zero_padded_conv_field(kernel: int, dilation: int) -> None:
    h, w = 5, 6
    dense = Grid(h, w, kernel, dilation).dense(h * w)
    rad = (kernel // 2) * dilation
    for i in range(h * w):
        for j in range(h * w):
            (ri, ci), (rj, cj) = rc(i, w), rc(j, w)
            dr, dc = rj - ri, cj - ci
            ok = abs(dr) <= rad and abs(dc) <= rad and dr % dilation == 0 and dc % dilation == 0
            assert bool(dense[i, j]) == ok


def test_truncate_matches_conv_receptive_field() -> None:
    # a patch j is in A(i) iff a zero-padded conv's output at i reads input j
    h, w, k = 4, 5, 3
    dense = Grid(h, w, k).dense(h * w)
    for j in range(h * w):
        x = torch.zeros(1, 1, h, w)
        x.view(-1)[j] = 1.0
        y = torch.nn.functional.conv2d(x, torch.ones(1, 1, k, k), padding=k // 2)
        assert torch.equal(y.view(-1) > 0, dense[:, j])


@pytest.mark.parametrize("kernel,dilation", [(3, 1), (3, 2), (5, 1)])
def test_shift_sees_kernel_squared_keys(kernel: int, dilation: int) -> None:
    h, w = 7, 6
    m = Grid(h, w, kernel, dilation, border="shift")
    dense = m.dense(h * w)
    assert torch.all(dense.sum(1) == kernel * kernel)
    # interior patches see the same neighbourhood as the truncated (centred) window
    t = Grid(h, w, kernel, dilation).dense(h * w)
    rad = (kernel // 2) * dilation
    for i in range(h * w):
        r, c = rc(i, w)
        if rad <= r < h - rad and rad <= c < w - rad:
            assert torch.equal(dense[i], t[i])


def test_shift_corner_1d_dilated() -> None:
    # 1 x 6 grid, kernel 3, dilation 2: position 0's group {0, 2, 4}; position 5's group {1, 3, 5}
    m = Grid(6, 6, 3, 2, border="shift").dense(36)
    assert m[0].view(6, 6)[0].nonzero().view(-1).tolist() == [0, 2, 4]
    assert m[5].view(6, 6)[0].nonzero().view(-1).tolist() == [1, 3, 5]


def test_repr_and_picture() -> None:
    assert repr(Grid(4, 4, 3)) == "Grid(height=4, width=4, kernel=3)"
    assert repr(Grid(8, 8, 3, 2, border="shift")) == "Grid(height=8, width=8, kernel=3, dilation=2, border='shift')"
    assert Grid(1, 3, 3).picture(3) == "1 1 0\n1 1 1\n0 1 1"


def test_errors() -> None:
    with pytest.raises(ValueError, match="needs L = S = height \\* width = 16 patches, got L=15, S=15"):
        Grid(4, 4, 3).dense(15)
    with pytest.raises(ValueError, match="kernel must be odd"):
        Grid(4, 4, 2)
    with pytest.raises(ValueError, match="kernel \\* dilation <= height and width"):
        Grid(4, 4, 3, 2, border="shift")
    with pytest.raises(ValueError, match="border must be"):
        Grid(4, 4, 3, border="wrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="height must be an int >= 1, got 0"):
        Grid(0, 4, 3)
