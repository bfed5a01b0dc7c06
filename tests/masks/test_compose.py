from __future__ import annotations

import pytest
import torch

from attnmm.masks import And, Causal, Full, Graph, Grid, Intersection, Not, Or, Padding, Window


def test_interval_intersection_keeps_band() -> None:
    m = Window(64, 64) & Padding([100, 80])
    assert isinstance(m, Intersection)
    s = m.structure
    assert (s.kind, s.left, s.right, s.batched) == ("band", 64, 64, True)
    assert (Causal() & Window(8, 8)).structure.kind == "band"
    assert (Causal() & Window(8, 8)).structure.right == 0
    assert (Full() & Causal()).structure.kind == "causal"
    assert (Full() & Full()).structure.kind == "full"
    assert (Causal() & Padding([3])).structure.kind == "interval"


def test_general_and_or_not() -> None:
    g = Grid(3, 3, 3)
    assert isinstance(g & Causal(), And)
    assert isinstance(g | Causal(), Or)
    assert isinstance(~g, Not)
    assert (g & Causal()).structure.kind == "sparse"
    dense = (g & Causal()).dense(9)
    assert torch.equal(dense, g.dense(9) & Causal().dense(9))
    assert torch.equal((g | Window(0, 1)).dense(9), g.dense(9) | Window(0, 1).dense(9))
    assert torch.equal((~g).dense(9), ~g.dense(9))


def test_reprs() -> None:
    assert repr(Window(1, 1) & Padding([2])) == "Window(left=1, right=1) & Padding(lengths=[2])"
    g = Grid(2, 2, 1)
    expected = "(Grid(height=2, width=2, kernel=1) & Causal()) | Window(left=0, right=0)"
    assert repr((g & Causal()) | Window(0, 0)) == expected
    assert repr(~(Causal() | Window(1, 0))) == "~(Causal() | Window(left=1, right=0))"
    assert repr(~Causal()) == "~Causal()"


def test_flattening() -> None:
    m = Window(1, 1) & Causal() & Padding([2])
    assert isinstance(m, Intersection) and len(m.parts) == 3
    o = Window(1, 1) | Causal() | Full()
    assert isinstance(o, Or) and len(o.parts) == 3


def test_cross_layout_composition_is_refused() -> None:
    g = Graph(torch.tensor([[0], [1]]), 2)
    with pytest.raises(TypeError, match="different layouts .* Graph\\(num_nodes=2, num_edges=1\\) is packed"):
        g & Padding([2])
    with pytest.raises(TypeError, match="different layouts"):
        g | Grid(1, 2, 1)
    # layout-free masks compose with either
    assert (g & Window(1, 1)).layout == "packed"


def test_batch_size_conflict() -> None:
    with pytest.raises(ValueError, match=r"different batch sizes: \[1, 2\]"):
        Padding([1, 2]) & Padding([3])


def test_non_mask_operand() -> None:
    with pytest.raises(TypeError, match="masks compose only with masks: got Tensor on the right of '&'"):
        Causal() & torch.ones(2, 2)  # type: ignore[operator]


def test_mask_mods_over_int32_positions_equal_int64() -> None:
    # FlexAttention's kernels pass int32 positions: "no bound" must not overflow them (Full() & Padding, a
    # window or chunk wider than any sequence)
    from attnmm.masks import Chunk, Documents, Segments

    huge = 2**40
    masks = [Full(), Full() & Padding([7, 3]), Window(huge, 0), Window(2, huge) & Padding([7, 0]), Chunk(huge, huge),
             Chunk(3, 1) & Causal(), Documents([3, 4]) & Causal(), Grid(3, 3, 3) & Causal(),
             Segments([4, 3], within=[Window(1, huge), Full()], links="full")]
    for mask in masks:
        out = []
        for dtype in (torch.int64, torch.int32):
            b = torch.arange(2, dtype=dtype).view(-1, 1, 1) if mask.batched else torch.zeros((), dtype=dtype)
            q, kv = torch.arange(7, dtype=dtype).view(1, -1, 1), torch.arange(9 if mask.batched else 7, dtype=dtype)
            out.append(mask.mask_mod(b, torch.zeros((), dtype=dtype), q, kv.view(1, 1, -1)))
        assert torch.equal(*out), mask
