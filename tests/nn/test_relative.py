import pytest
import torch

from attnmm import RelativePositionBias, attend
from attnmm.masks import Causal, Full, Graph, Grid, Padding, Window


def dense_attention(q, k, v, allowed, dense_bias):
    """Masked softmax with a dense (H, L, S) bias, computed by hand."""
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + dense_bias
    a = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
    return a @ v


def test_window_table_and_lookup():
    rpb = RelativePositionBias.for_window(3, left=2, right=1)
    assert rpb.table.shape == (4, 3)
    mask = Window(2, 1)
    pairs = mask.pairs(6, 6)
    out = rpb(mask, 6, 6)
    assert out.shape == (pairs.nnz, 3)
    torch.testing.assert_close(out, rpb.table[pairs.col - pairs.row + 2])


@pytest.mark.parametrize("mask", [Window(2, 1), Window(2, 1) & Causal(), Window(2, 1) & Padding([6, 4])], ids=repr)
def test_window_bias_equals_dense_reference(mask):
    torch.manual_seed(0)
    H, L = 2, 6
    rpb = RelativePositionBias.for_window(H, 2, 1)
    with torch.no_grad():
        rpb.table.normal_()
    q, k, v = (torch.randn(2, H, L, 4) for _ in range(3))
    # hand-computed dense bias: table[j - i + left] wherever |offset| fits the window
    off = torch.arange(L).view(1, -1) - torch.arange(L).view(-1, 1)  # (L, S): j - i
    dense = rpb.table[(off + 2).clamp(0, 3)].permute(2, 0, 1)  # (H, L, S)
    allowed = mask.dense(L, L, 2).view(-1, 1, L, L)
    expected = dense_attention(q, k, v, allowed, dense)
    got = attend(q, k, v, mask, bias=rpb(mask, L, L, 2), backend="reference")
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attend(q, k, v, mask, bias=rpb(mask, L, L, 2)), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dilation", [1, 2])
def test_grid_bias_equals_dense_reference(dilation):
    torch.manual_seed(1)
    H, h, w, kernel = 2, 4, 5, 3
    mask = Grid(h, w, kernel=kernel, dilation=dilation)
    rpb = RelativePositionBias.for_grid(H, kernel, dilation)
    assert rpb.table.shape == (kernel * kernel, H)
    with torch.no_grad():
        rpb.table.normal_()
    P = h * w
    r, c = torch.arange(P) // w, torch.arange(P) % w
    dr = r.view(1, -1) - r.view(-1, 1)  # (P, P): row of key minus row of query
    dc = c.view(1, -1) - c.view(-1, 1)
    idx = ((dr // dilation + 1).clamp(0, 2)) * kernel + (dc // dilation + 1).clamp(0, 2)
    dense = rpb.table[idx].permute(2, 0, 1)  # (H, P, P)
    q, k, v = (torch.randn(1, H, P, 4) for _ in range(3))
    expected = dense_attention(q, k, v, mask.dense(P), dense)
    got = attend(q, k, v, mask, bias=rpb(mask, P, P), backend="reference")
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_grid_shift_border_uses_larger_table():
    mask = Grid(5, 5, kernel=3, border="shift")
    with pytest.raises(ValueError, match="outside the table"):
        RelativePositionBias.for_grid(2, 3)(mask, 25, 25)
    rpb = RelativePositionBias.for_grid(2, 3, border="shift")
    assert rpb.table.shape == (25, 2)
    assert rpb(mask, 25, 25).shape == (mask.nnz(25), 2)


def test_full_attention_over_patches():
    torch.manual_seed(2)
    rpb = RelativePositionBias.for_patches(3, height=2, width=3)
    assert rpb.table.shape == (3 * 5, 3)
    out = rpb(None, 6, 6)
    assert out.shape == (36, 3)
    # the bias of a pair depends only on its 2-D offset
    r, c = torch.arange(6) // 3, torch.arange(6) % 3
    pairs = Full().pairs(6, 6)
    key = (r[pairs.col] - r[pairs.row]) * 10 + (c[pairs.col] - c[pairs.row])
    for k in key.unique():
        rows = out[key == k]
        assert torch.equal(rows, rows[:1].expand_as(rows))
    assert out.unique(dim=0).size(0) == 15


def test_clip_and_gradients():
    rpb = RelativePositionBias(2, max_offset=2, clip=True)
    out = rpb(Causal(), 6, 6)
    pairs = Causal().pairs(6, 6)
    torch.testing.assert_close(out, rpb.table[(pairs.col - pairs.row).clamp(-2, 2) + 2])
    out.sum().backward()
    assert rpb.table.grad[0].sum() > 0


def test_errors():
    with pytest.raises(ValueError, match=r"pair \(i=0, j=2\) has j - i = 2, outside the table's offsets \[-1, 1\]"):
        RelativePositionBias.for_window(2, 1, 1)(Full(), 4, 4)
    with pytest.raises(ValueError, match="needs the patch grid's width"):
        RelativePositionBias.for_grid(2, 3)(Full(), 9, 9)
    with pytest.raises(ValueError, match=r"needs L = S = 6 patches, got L=5, S=5"):
        RelativePositionBias.for_patches(2, 2, 3)(None, 5, 5)
    with pytest.raises(ValueError, match="multiples of dilation=2"):
        RelativePositionBias(2, 3, dilation=2)
    with pytest.raises(ValueError, match="must both be ints"):
        RelativePositionBias(2, (1, 1), 1)
    with pytest.raises(ValueError, match="grid_size is for a 2-D bias"):
        RelativePositionBias(2, 1, grid_size=(2, 2))
    with pytest.raises(TypeError, match="got Tensor"):
        RelativePositionBias.for_window(2, 1, 1)(torch.ones(3, 3), 3, 3)


def test_graph_mask_pairs_aligned():
    mask = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    out = RelativePositionBias(2, max_offset=2)(mask, 3, 3)
    pairs = mask.pairs(3, 3)
    assert out.shape == (3, 2)
    assert (pairs.col - pairs.row).tolist() == [2, -1, -1]


def test_repr():
    assert "max_offset=1, min_offset=-2" in repr(RelativePositionBias.for_window(4, 2, 1))
    assert "max_offset=(2, 2), min_offset=(-2, -2), dilation=2" in repr(RelativePositionBias.for_grid(4, 3, 2))
