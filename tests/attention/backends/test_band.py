"""The band backend equals the reference and stays within O(L * w) memory."""

from __future__ import annotations

import pytest
import torch
from _compare import OpSizes, compare, randn
from hypothesis import given
from hypothesis import strategies as st

from attnmm import attend
from attnmm.attention.backends import get_backend
from attnmm.attention.backends._blocks import BandGeometry, choose_block
from attnmm.masks import Causal, Chunk, Mask, Padding, Window


@st.composite
def band_masks(draw: st.DrawFn, batch_size: int, num_cols: int) -> Mask:
    """A banded mask, maybe intersected with Causal and/or Padding (which keeps it banded)."""
    mask: Mask = draw(
        st.one_of(
            st.builds(Window, st.integers(0, 6), st.integers(0, 6)),
            st.builds(Chunk, st.integers(1, 5), st.integers(0, 2)),
        )
    )
    if draw(st.booleans()):
        mask = mask & Causal()
    if draw(st.booleans()):
        lengths = draw(st.lists(st.integers(0, num_cols), min_size=batch_size, max_size=batch_size))
        mask = mask & Padding(lengths)
    assert mask.structure.kind == "band"
    return mask


@given(
    st.data(),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 20),
    st.integers(1, 20),
    st.sampled_from([torch.float32, torch.float64]),
    st.sampled_from(["softmax", "relu"]),
    st.booleans(),
    st.sampled_from([None, 1, 2, 4, 8]),
)
def test_matches_reference(
    data: st.DataObject, B: int, H: int, L: int, S: int, dtype: torch.dtype, score: str, bias: bool, block: int | None
) -> None:
    mask = data.draw(band_masks(B, S))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = randn(B, H, L, 3, dtype=dtype, seed=seed), randn(B, H, S, 3, dtype=dtype, seed=seed + 1), randn(
        B, H, S, 2, dtype=dtype, seed=seed + 2
    )
    backend = get_backend("band")
    backend.block = block  # type: ignore[attr-defined]
    try:
        compare("band", q, k, v, mask, with_bias=bias, score=score, seed=seed)
    finally:
        backend.block = None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "mask",
    [Padding([0, 5]) & Window(2, 1), Window(1, 1) & Padding([0, 0]), Chunk(3, 0) & Padding([4, 1])],
    ids=repr,
)
def test_empty_rows_give_zero_output_and_gradient(mask: Mask) -> None:
    q, k, v = (randn(2, 2, 7, 4, seed=s) for s in range(3))
    out, _, dq, _, _, _ = compare("band", q, k, v, mask, with_bias=True)
    empty = ~mask.dense(7, 7, 2).any(-1)  # (B, L)
    assert empty.any()
    assert (out.permute(0, 2, 1, 3)[empty] == 0).all()
    assert (dq.permute(0, 2, 1, 3)[empty] == 0).all()


@pytest.mark.parametrize("L, S", [(1, 1), (1, 9), (9, 1), (5, 40), (40, 5)])
def test_single_query_and_unequal_lengths(L: int, S: int) -> None:
    q, k, v = randn(1, 2, L, 4, seed=0), randn(1, 2, S, 4, seed=1), randn(1, 2, S, 4, seed=2)
    for mask in (Window(3, 0), Window(0, 3), Window(100, 100), Chunk(2, 1)):
        compare("band", q, k, v, mask, with_bias=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype: torch.dtype) -> None:
    q, k, v = (randn(2, 2, 33, 16, dtype=dtype, seed=s) for s in range(3))
    compare("band", q, k, v, Window(4, 3) & Padding([33, 20]), with_bias=True)


def test_dropout_uses_the_returned_weights() -> None:
    q, k, v = (randn(1, 2, 64, 8, seed=s).requires_grad_(True) for s in range(3))
    mask, p = Window(8, 8), 0.5
    ref = attend(q, k, v, mask, backend="reference", return_weights=True)[1].values
    out, w = attend(q, k, v, mask, backend="band", dropout_p=p, return_weights=True)
    kept = w.values != 0
    torch.testing.assert_close(w.values[kept], ref[kept] / (1 - p))  # kept weights are rescaled
    assert 0.4 < 1 - kept.double().mean() < 0.6  # about p of them are dropped
    dense = w.to_dense(64, 64, 1)  # (1, H, L, S)
    torch.testing.assert_close(out, dense @ v)  # the output uses exactly these weights
    g = torch.randn_like(out)
    (dv,) = torch.autograd.grad(out, v, g)
    torch.testing.assert_close(dv, dense.transpose(-1, -2) @ g)


def test_no_length_by_keys_tensor() -> None:
    L = S = 512
    q, k, v = (randn(1, 2, L, 8, dtype=torch.float32, seed=s).requires_grad_(True) for s in range(3))
    bias = torch.randn(Window(3, 3).nnz(L, S), 2, requires_grad=True)
    sizes = OpSizes()
    with sizes:
        out = attend(q, k, v, Window(3, 3), bias=bias, backend="band")
        out.sum().backward()
    assert sizes.largest < L * S // 4, f"{sizes.largest_op} made a tensor of {sizes.largest} elements"


def test_geometry_and_block_choice() -> None:
    geo = BandGeometry.build(2, 3, 100, 90, 10, 5, block=16)
    assert (geo.T, geo.c, geo.W, geo.nb, geo.nbp) == (16, 1, 32, 7, 8)
    assert BandGeometry.build(1, 1, 5, 5, 1000, 1000).left == 4  # clamped to L - 1
    assert [choose_block(w) for w in (1, 129, 1000)] == [16, 32, 64]


def test_backward_inside_autocast() -> None:
    # found by fuzzing: a backward pass run inside torch.autocast cast the kernel's products to bfloat16
    # while their out= buffers stayed float32 ("expected scalar type BFloat16 but found Float")
    q, k, v = (randn(2, 2, 9, 4, dtype=torch.float32, seed=s).requires_grad_(True) for s in range(3))
    grads = []
    for inside in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attend(q, k, v, Window(2, 1), backend="band")
            if inside:
                g = torch.autograd.grad(out.float().sum(), (q, k, v))
        if not inside:
            g = torch.autograd.grad(out.float().sum(), (q, k, v))
        grads.append(g)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@given(
    st.data(),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 40),
    st.integers(1, 40),
    st.sampled_from(["softmax", "relu"]),
    st.sampled_from([8, 64, 256]),
)
def test_inference_in_pieces_matches_reference(
    data: st.DataObject, B: int, H: int, L: int, S: int, score: str, piece: int
) -> None:
    # without a gradient the forward runs in pieces of rows or of sequences; small pieces split every
    # sequence into spans whose keys start mid-sequence
    from attnmm.attention.backends import band

    mask = data.draw(band_masks(B, S))
    seed = data.draw(st.integers(0, 2**16))
    q, k, v = randn(B, H, L, 3, seed=seed), randn(B, H, S, 3, seed=seed + 1), randn(B, H, S, 2, seed=seed + 2)
    default, band._PIECE = band._PIECE, piece
    try:
        with torch.no_grad():
            out = attend(q, k, v, mask, backend="band", score=score)
    finally:
        band._PIECE = default
    ref = attend(q, k, v, mask, backend="reference", score=score)
    torch.testing.assert_close(out, ref)


@given(
    st.data(),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 12),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 60),
    st.sampled_from(["softmax", "relu"]),
    st.booleans(),
)
def test_sequence_by_sequence_matches_reference(
    data: st.DataObject, B: int, H: int, blocks: int, block: int, S: int, score: str, token_major: bool
) -> None:
    """Training on long sequences reads each sequence's queries, keys and values in place (a padded copy
    only for the blocks at its ends) and writes the output and the gradients laid out as the inputs
    (here every sequence counts as long): the reference's values and gradients, for every band mask
    (with Causal, per-item Padding), L != S, either layout."""
    from unittest import mock

    from attnmm.attention.backends import band

    L = blocks * block
    mask = data.draw(band_masks(B, S))
    seed = data.draw(st.integers(0, 2**16))
    shapes = [(B, L, H, 3), (B, S, H, 3), (B, S, H, 2)] if token_major else [(B, H, L, 3), (B, H, S, 3), (B, H, S, 2)]
    inputs = [randn(*shape, dtype=torch.float64, seed=seed + i) for i, shape in enumerate(shapes)]
    leaves = [t.requires_grad_(True) for t in inputs]
    q, k, v = (t.transpose(1, 2) if token_major else t for t in leaves)
    ref = attend(q, k, v, mask, backend="reference", score=score)
    d_out = randn(*ref.shape, dtype=torch.float64, seed=seed + 9)
    expected = torch.autograd.grad(ref, leaves, d_out)
    taken: list[bool] = []
    decide = band._by_sequence
    backend = get_backend("band")
    backend.block = block  # type: ignore[attr-defined]
    try:
        with mock.patch.object(band, "SEQUENCE_BLOCKS", 1), mock.patch.object(
            band, "_by_sequence", lambda *a: taken.append(decide(*a)) or taken[-1]
        ):
            out = attend(q, k, v, mask, backend="band", score=score)
    finally:
        backend.block = None  # type: ignore[attr-defined]
    assert taken == [True]
    torch.testing.assert_close(out, ref)
    got = torch.autograd.grad(out, leaves, d_out)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    # the output and the queries' gradient laid out as q: nothing for autograd to copy
    assert (out.transpose(1, 2) if token_major else out).is_contiguous() and all(g.is_contiguous() for g in got)


def test_long_sequences_take_the_sequence_path_and_short_ones_not() -> None:
    from attnmm.attention.backends import band

    geo = BandGeometry.build(1, 4, 65536, 65536, 64, 64)
    q = torch.zeros(1, 1, 1, 64).expand(1, 4, 65536, 64)
    assert band._by_sequence(geo, q, q, q, None, False, 0.0)
    assert not band._by_sequence(geo, q, q, q, None, True, 0.0)  # returned weights
    assert not band._by_sequence(geo, q, q, q, None, False, 0.1)  # dropout
    assert not band._by_sequence(geo, q, q.transpose(2, 3).mT, q[..., ::2], None, False, 0.0)  # rows not contiguous
    short = BandGeometry.build(8, 4, 256, 256, 64, 64)
    assert not band._by_sequence(short, q, q, q, None, False, 0.0)
    uneven = BandGeometry.build(1, 4, 65536 - 1, 65536, 64, 64)
    assert not band._by_sequence(uneven, q, q, q, None, False, 0.0)


def test_sequence_keys_interior_views_and_padded_ends() -> None:
    """The key windows of one sequence: views of the keys inside it, zero-padded copies at its ends, equal
    to the padded layout's windows; the adjoint adds every window's rows back onto the keys they read."""
    from attnmm.attention.backends.band import _SequenceKeys

    geo = BandGeometry.build(1, 1, 64, 64, 5, 3, 4)
    keys = randn(64, 3, dtype=torch.float64, seed=1)
    seq = _SequenceKeys(geo, keys, torch.zeros_like(keys))
    padded = geo.windows(geo.pad_keys(keys.view(1, 1, 64, 3)))[: geo.nb]
    pieces = list(seq.pieces(5))
    assert pieces[0][0] == 0 and pieces[-1][1] == geo.nb and 0 < seq.first < seq.end < geo.nb
    for n0, n1 in pieces:
        windows = seq.windows(n0, n1)
        torch.testing.assert_close(windows, padded[n0:n1])
        assert (windows.untyped_storage().data_ptr() == keys.untyped_storage().data_ptr()) == (
            seq.first <= n0 and n1 <= seq.end
        )
        x = randn(n1 - n0, geo.T, geo.W, dtype=torch.float64, seed=n0)
        y = randn(n1 - n0, geo.T, 3, dtype=torch.float64, seed=n0 + 1)
        flat = geo.new_key_grad(keys, 3)
        geo.accumulate_keys(flat, n0, x, y, alpha=0.5)
        before = seq.grad.clone()
        seq.accumulate(n0, n1, x, y, alpha=0.5)
        torch.testing.assert_close(seq.grad - before, geo.unpad_keys(flat).view(64, 3))
