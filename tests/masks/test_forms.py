"""Every mask's three forms agree: mask_mod (predicate), dense (reference) and pairs (sparse)."""

from __future__ import annotations

import torch
from _strategies import documents_masks, graph_masks, grid_masks, same_graph_masks, segments_masks, sequence_masks
from hypothesis import given
from hypothesis import strategies as st

from attnmm.masks import Mask, list_masks


def assert_forms_agree(mask: Mask, num_rows: int, num_cols: int, batch_size: int | None) -> None:
    dense = mask.dense(num_rows, num_cols, batch_size)
    pairs = mask.pairs(num_rows, num_cols, batch_size)
    # the predicate, evaluated pair by pair in a plain loop, is the definition
    expected = torch.zeros_like(dense)
    for b in range(dense.size(0) if dense.dim() == 3 else 1):
        for i in range(num_rows):
            for j in range(num_cols):
                ok = bool(mask.mask_mod(torch.tensor(b), torch.tensor(0), torch.tensor(i), torch.tensor(j)))
                if dense.dim() == 3:
                    expected[b, i, j] = ok
                else:
                    expected[i, j] = ok
    assert torch.equal(dense, expected)
    assert torch.equal(pairs.to_dense(), dense)
    # sorted by (batch, row, col), no duplicates
    seg = pairs.segment() * max(num_cols, 1) + pairs.col
    assert torch.all(seg[1:] > seg[:-1])
    assert mask.nnz(num_rows, num_cols, batch_size) == int(dense.sum())
    bound = mask.nnz_bound(num_rows, num_cols, batch_size)  # cheap, never below the count
    assert bound is None or bound >= int(dense.sum())
    assert pairs.crow()[-1] == pairs.nnz


@given(st.data(), st.integers(1, 3), st.integers(0, 7), st.integers(0, 7))
def test_sequence_masks(data: st.DataObject, batch_size: int, num_rows: int, num_cols: int) -> None:
    mask = data.draw(sequence_masks(batch_size, num_cols))
    assert_forms_agree(mask, num_rows, num_cols, batch_size)


@given(st.data(), st.integers(1, 3))
def test_grid_masks(data: st.DataObject, batch_size: int) -> None:
    mask, p = data.draw(grid_masks(batch_size))
    assert_forms_agree(mask, p, p, batch_size)


@given(st.data(), st.integers(1, 3), st.integers(0, 9), st.integers(0, 9))
def test_documents_masks(data: st.DataObject, batch_size: int, num_rows: int, num_cols: int) -> None:
    mask = data.draw(documents_masks(batch_size, min(num_rows, num_cols)))
    assert_forms_agree(mask, num_rows, num_cols, batch_size)


@given(st.data(), st.integers(1, 3))
def test_segments_masks(data: st.DataObject, batch_size: int) -> None:
    mask, length = data.draw(segments_masks(batch_size))
    assert_forms_agree(mask, length, length, batch_size)


@given(graph_masks())
def test_graph_masks(drawn: tuple[Mask, int, int]) -> None:
    mask, num_rows, num_cols = drawn
    assert_forms_agree(mask, num_rows, num_cols, None)


@given(same_graph_masks())
def test_same_graph_masks(drawn: tuple[Mask, int]) -> None:
    mask, n = drawn
    assert_forms_agree(mask, n, n, None)


def test_every_builtin_mask_is_exported() -> None:
    import attnmm.masks as masks

    for name in list_masks():
        cls = masks.get_mask(name)
        if cls.__module__.startswith("attnmm.masks."):  # (a test or a page may register its own)
            assert getattr(masks, name) is cls


def test_pairs_cost_follows_nnz() -> None:
    # a long window's sparse form is built without an (L, S) tensor: L = 10**6 would need 10**12 bools
    from attnmm.masks import Padding, Window

    mask = Window(3, 3) & Padding([10**6])
    pairs = mask.pairs(10**6, 10**6)
    assert pairs.nnz == 7 * 10**6 - 12


def test_huge_widths_do_not_overflow() -> None:
    # widths past int64 once wrapped around in the interval arithmetic: the sparse form lost pairs
    from attnmm.masks import Chunk, Padding, Window

    for mask in [Window(10**30, 2**63 - 1), Window(0, 2**63 - 1), Chunk(10**30, 10**30), Chunk(3, 2**63 - 1)]:
        assert_forms_agree(mask, 5, 6, None)
        assert_forms_agree(mask & Padding([6, 2]), 5, 6, 2)
