from __future__ import annotations

import pytest
import torch
from _oracle import grads, supporting_backends

from attnmm import attend
from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, Segments, Window


def placed(sizes: list[int], blocks: list[list[Mask | None]], lengths: list[list[int]] | None, b: int = 0):
    """The definition: each block's dense mask placed at its segments' offsets, padding removed."""
    offsets = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
    out = torch.zeros(offsets[-1], offsets[-1], dtype=torch.bool)
    for a, row in enumerate(blocks):
        for c, m in enumerate(row):
            if m is None:
                continue
            block = m.dense(sizes[a], sizes[c])
            block = block[b] if block.dim() == 3 else block
            if lengths is not None:
                block = block.clone()
                block[lengths[b][a] :] = False
                block[:, lengths[b][c] :] = False
            out[offsets[a] : offsets[a + 1], offsets[c] : offsets[c + 1]] = block
    return out


def test_late_fusion_is_block_diagonal() -> None:
    within = [Grid(2, 2, kernel=1), Window(1, 0), Causal()]
    m = Segments([4, 3, 2], within=within)
    expected = placed([4, 3, 2], [[within[0], None, None], [None, within[1], None], [None, None, within[2]]], None)
    assert torch.equal(m.dense(9), expected)
    assert m.structure.kind == "segments" and not m.batched


def test_joint_attention_and_link_tables() -> None:
    within = [Grid(2, 2, kernel=1), None, Causal()]
    joint = Segments([4, 3, 2], within=within, links="full")
    full = Full()
    expected = placed([4, 3, 2], [[within[0], full, full], [full, full, full], [full, full, within[2]]], None)
    assert torch.equal(joint.dense(9), expected)
    # text queries attend the image through a mask of their own, audio attends nothing of the others,
    # and the image does not attend itself
    link = Window(1, 1)
    table = [[False, True, False], [False, True, False], [link, False, True]]
    m = Segments([4, 3, 2], within=within, links=table)
    expected = placed([4, 3, 2], [[None, full, None], [None, full, None], [link, None, within[2]]], None)
    assert torch.equal(m.dense(9), expected)


def test_lengths_pad_each_segment() -> None:
    lengths = [[4, 0, 2], [1, 3, 1]]
    within = [Grid(2, 2, kernel=3), Window(1, 0), None]
    m = Segments([4, 3, 2], within=within, links="full", lengths=lengths)
    assert m.batched and m.structure.batch_size == 2
    dense = m.dense(9)
    for b in range(2):
        blocks = [[within[0], Full(), Full()], [Full(), within[1], Full()], [Full(), Full(), Full()]]
        assert torch.equal(dense[b], placed([4, 3, 2], blocks, lengths, b))
    assert not dense[0, 4:7].any() and not dense[0, :, 4:7].any()  # item 0 lacks the audio


def test_all_full_is_full() -> None:
    assert Segments([2, 3], links="full").structure.kind == "full"
    assert Segments([2, 3], links="full", lengths=[[2, 3]]).structure.kind == "segments"


def test_repr() -> None:
    assert repr(Segments([2, 3])) == "Segments(sizes=[2, 3])"
    m = Segments([4, 2], within=[Grid(2, 2, kernel=3), None], links="full", lengths=[[4, 0]])
    assert repr(m) == "Segments(sizes=[4, 2], within=[Grid(height=2, width=2, kernel=3), None], links='full', batch=1)"
    m = Segments([1, 1], links=[[True, Window(0, 0)], [False, True]])
    assert repr(m) == "Segments(sizes=[1, 1], links=[[1, Window(left=0, right=0)], [0, 1]])"


def test_errors_say_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"lays its segments over L = S = 5 positions, got L=6"):
        Segments([2, 3]).dense(6)
    with pytest.raises(ValueError, match=r"block \(0, 0\) .* needs L = S = height \* width = 9"):
        Segments([8, 2], within=[Grid(3, 3, kernel=3), None])
    with pytest.raises(ValueError, match=r"links\[1\]\[1\] is a mask; the mask within segment 1 goes in within\[1\]"):
        Segments([2, 2], links=[[True, True], [True, Causal()]])
    with pytest.raises(ValueError, match="2 x 2 table"):
        Segments([2, 2], links=[[True, True]])
    with pytest.raises(ValueError, match="'none', 'full'"):
        Segments([2, 2], links="joint")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"links\[0\]\[1\] must be True, False or a Mask"):
        Segments([2, 2], links=[[True, None], [True, True]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="between 0 and each segment's size"):
        Segments([2, 2], lengths=[[3, 1]])
    with pytest.raises(ValueError, match=r"shape \(B, K\) = \(B, 2\)"):
        Segments([2, 2], lengths=[2, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="different batch sizes"):
        Segments([2, 2], within=[Padding([1, 2, 2]), None], lengths=[[1, 1], [2, 2]])
    with pytest.raises(TypeError, match="packed node layout"):
        Segments([2, 2], within=[Graph(torch.tensor([[0], [1]]), 2), None])
    with pytest.raises(ValueError, match="one mask .* per segment: 2 segments, got 1"):
        Segments([2, 2], within=[Causal()])


def test_pairs_cost_follows_nnz() -> None:
    # 300k positions: the dense form would hold 9 * 10**10 bools; the pairs are built block by block
    m = Segments([200_000, 100_000], within=[Window(2, 2), Chunk(4, 0)], links=[[True, False], [Window(0, 0), True]])
    pairs = m.pairs(300_000)
    assert pairs.nnz == (5 * 200_000 - 6) + 4 * 100_000 + 100_000
    assert m.nnz_bound(300_000) == pairs.nnz
    seg = pairs.row * 300_000 + pairs.col
    assert bool((seg[1:] > seg[:-1]).all())  # sorted by (row, col), merged without a sort


@pytest.mark.parametrize(
    "mask",
    [
        Segments([4, 3, 2], within=[Grid(2, 2, kernel=3), Window(1, 0), Causal()], lengths=[[4, 0, 2], [0, 3, 1]]),
        Segments([4, 3, 2], within=[Grid(2, 2, kernel=3), Window(1, 0), Causal()], links="full",
                 lengths=[[4, 0, 2], [0, 0, 0]]),
        Segments([4, 5], within=[None, Causal()], links=[[True, False], [True, True]], lengths=[[0, 5], [2, 0]]),
        Segments([3, 6], links="full", lengths=[[3, 6], [1, 2]]) & Padding([9, 4]),
    ],
    ids=repr,
)
def test_missing_segments_give_zero_outputs_and_gradients(mask: Mask) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = attend(q, k, v, mask, backend="reference")
    ref_grads = grads(ref, [q, k, v])
    empty = ~mask.dense(9, 9, 2).any(-1)  # (B, L): missing and padded queries
    assert empty.any()
    assert torch.all(ref.detach().permute(0, 2, 1, 3)[empty] == 0)
    gq = ref_grads[0].permute(0, 2, 1, 3)
    assert torch.all(gq[empty] == 0)
    names = supporting_backends(q, k, v, mask)
    assert "sparse" in names
    for name in names:
        out = attend(q, k, v, mask, backend=name)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref)
        for a, b in zip(grads(out, [q, k, v]), ref_grads):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b)
