"""What a mask answers about itself (STYLE 16): each query against a brute-force reading of the dense form,
for the built-in masks and their compositions; and a new mask written in this file alone, which streams
and runs block by block as any built-in one does, no consumer taught about it."""

from __future__ import annotations

import math

import pytest
import torch
from _oracle import loop_attend
from _strategies import documents_masks, sequence_masks
from _streaming import stream_in_pieces
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from attnmm import attend
from attnmm.adapters import SpeechAdapter, SpeechStream
from attnmm.masks import (
    Causal,
    Chunk,
    Documents,
    Full,
    Grid,
    Mask,
    Padding,
    Segments,
    Structure,
    Window,
    as_blocks,
    block_sizes,
    first_key,
    grid_size,
    grid_window,
    lookahead_error,
    padding_lengths,
    segmentation,
    without_padding,
)
from attnmm.masks._pairs import Pairs
from attnmm.nn import Encoder


class Strided(Mask):
    r"""Every ``stride``-th earlier position within ``reach``: :math:`A(i) = \{j \le i : i - j \le
    \mathrm{reach},\ (i - j) \bmod \mathrm{stride} = 0\}` (a dilated causal window). Written here only:
    the library knows nothing of it but the :class:`Mask` contract."""

    def __init__(self, stride: int, reach: int) -> None:
        self.stride, self.reach = stride, reach

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        d = q_idx - kv_idx
        return (d >= 0) & (d <= self.reach) & (d % self.stride == 0)

    def _pairs(self, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device) -> Pairs:
        q = torch.arange(num_rows, device=device).view(-1, 1)
        col = q - torch.arange(0, self.reach + 1, self.stride, device=device).flip(0).view(1, -1)  # (L, taps)
        ok = (col >= 0) & (col < num_cols)
        return Pairs(q.expand_as(col)[ok], col[ok], None, num_rows, num_cols, None)

    # what consumers read: it never looks ahead and forgets keys older than ``reach``; reads the same anywhere
    @property
    def structure(self) -> Structure:
        return Structure("sparse", left=self.reach, right=0)

    def shifted(self, q_offset: int, kv_offset: int) -> Mask:
        return self if q_offset == kv_offset else super().shifted(q_offset, kv_offset)

    def __repr__(self) -> str:
        return f"Strided(stride={self.stride}, reach={self.reach})"


def test_mask_is_slim() -> None:
    """Everything a consumer reads beyond the forms is the one structural description."""
    public = [name for name in dir(Mask) if not name.startswith("_")]
    assert len(public) <= 12, public


def _dense(mask: Mask, L: int, S: int, B: int | None) -> Tensor:
    out = mask.dense(L, S, B)
    return out if out.dim() == 3 else out.expand(B or 1, L, S)


# ---------------------------------------------------------------------- the queries, checked by brute force


@given(st.data(), st.integers(1, 3), st.integers(1, 12), st.integers(1, 12), st.integers(0, 5), st.integers(0, 5))
def test_shifted_is_the_block_of_the_longer_sequence(data, B: int, L: int, S: int, qo: int, ko: int) -> None:
    mask = data.draw(sequence_masks(B, S + ko) | st.just(Strided(2, 5)))
    shifted = mask.shifted(qo, ko)
    whole = _dense(mask, L + qo, S + ko, B)
    assert torch.equal(_dense(shifted, L, S, B), whole[:, qo:, ko:])
    pairs = shifted.pairs(L, S, B if shifted.batched else None)
    assert pairs.nnz == int(_dense(shifted, L, S, B)[0 if not shifted.batched else slice(None)].sum())


@given(st.data(), st.integers(1, 40))
def test_first_key_is_a_lower_bound(data, end: int) -> None:
    mask = data.draw(sequence_masks(1, 64).filter(lambda m: not m.batched) | st.just(Strided(3, 7)))
    first = first_key(mask, end)
    if first is not None:
        later = mask.dense(64, 64)[end:]  # every query at end or later
        assert not later[:, :first].any(), (mask, end, first)


@given(st.data(), st.sampled_from([1, 2, 3, 4, 6, 12]))
def test_a_bounded_look_ahead_ends_at_the_block(data, step: int) -> None:
    mask = data.draw(sequence_masks(1, 48).filter(lambda m: not m.batched) | st.just(Strided(2, 4) | Chunk(4, 0)))
    if lookahead_error(mask, step) is None:
        dense = mask.dense(48, 48)
        block_end = (torch.arange(48) // step + 1) * step
        assert not (dense & (torch.arange(48).view(1, -1) >= block_end.view(-1, 1))).any(), (mask, step)


def test_lookahead_answers_from_the_parts() -> None:
    assert lookahead_error(Chunk(4, 1) & Window(2, 3), 4) is None  # one bounded part bounds &
    assert lookahead_error(Chunk(4, 1) | Window(0, 3), 4) is not None  # | needs every part bounded
    assert block_sizes(Chunk(4, 1) | Chunk(6, 0)) == frozenset({4, 6})
    assert "complement" in lookahead_error(~Chunk(4, 1), 4)
    assert lookahead_error(Full(), 1) is not None and lookahead_error(Causal(), 1) is None


@given(st.data(), st.integers(1, 3), st.integers(1, 10))
def test_padding_lengths_bound_the_keys(data, B: int, L: int) -> None:
    mask = data.draw(sequence_masks(B, L))
    lengths = padding_lengths(mask)
    if lengths is not None:  # no key at or past an item's length
        assert not (_dense(mask, L, L, B) & (torch.arange(L).view(1, 1, -1) >= lengths.view(-1, 1, 1))).any()


@given(st.data(), st.integers(1, 3), st.integers(1, 10))
def test_without_padding_is_the_mask_on_real_tokens(data, B: int, L: int) -> None:
    """Every token real (each Padding's lengths L): the mask with its padding dropped allows the same."""
    base = st.sampled_from([Causal(), Window(1, 0), Window(0, 2), Chunk(3, 1), Strided(2, 4), Full()])
    real = Padding([L] * B)
    parts = st.one_of(base, st.just(real))
    mask = data.draw(st.recursive(parts, lambda m: st.one_of(
        st.tuples(m, m).map(lambda ab: ab[0] & ab[1]), st.tuples(m, m).map(lambda ab: ab[0] | ab[1]),
        m.map(lambda a: ~a)), max_leaves=4))
    assert torch.equal(_dense(without_padding(mask), L, L, B), _dense(mask, L, L, B)), mask


def test_padding_queries() -> None:
    m = Causal() & Padding([3, 5]) & Padding([4, 2])
    assert padding_lengths(m).tolist() == [3, 2]
    assert repr(without_padding(m)) == "Causal()"
    assert without_padding(Padding([3]) | Causal()).structure.kind == "full"
    assert padding_lengths(Window(2, 2)) is None


def test_grid_queries() -> None:
    assert grid_size(Grid(3, 4, kernel=3) & Padding([12])) == (3, 4)
    assert grid_window(without_padding(Grid(3, 4, kernel=3) & Padding([12]))) == (3, 1)
    assert grid_window(Grid(3, 4, kernel=3) & Window(1, 1)) is None  # not a convolution's field
    assert grid_window(Grid(3, 4, kernel=3, border="shift")) is None
    assert grid_size(Window(1, 1)) is None


def test_segmentation() -> None:
    seg = Segments([3, 2], lengths=[[3, 1]])
    sizes, lengths = segmentation(seg & Padding([5]))
    assert sizes == (3, 2) and lengths.tolist() == [[3, 1]]
    assert segmentation(Window(1, 1)) is None


@given(st.data(), st.integers(1, 3), st.integers(1, 14))
def test_blocks_are_the_mask(data, B: int, L: int) -> None:
    docs = data.draw(documents_masks(B, L))
    other = data.draw(st.sampled_from([Causal(), Window(1, 0), Chunk(3, 1), Strided(2, 4), Padding([L] * B)]))
    for mask in (docs, docs & other):
        blocks = as_blocks(mask, L, L)
        if blocks is not None:
            assert torch.equal(_dense(blocks, L, L, B), _dense(mask, L, L, B)), mask


# ---------------------------------------------------------------------- a mask of this file, everywhere


def test_a_new_mask_runs_block_by_block() -> None:
    """``Documents & Strided``: each document computed alone (the segments path), the new mask seen from
    each document's offset: values and gradients equal the reference."""
    torch.manual_seed(0)
    mask = Documents([5, 0, 7, 3]) & Strided(2, 4)
    assert as_blocks(mask, 16, 16) is not None
    q, k, v = (torch.randn(2, 2, 16, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = attend(q, k, v, mask, backend="segments")
    expected = loop_attend(q, k, v, mask, 0.5, "softmax", None)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(expected, (q, k, v), grad)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize(
    "mask,step", [(Strided(2, 6), 1), (Chunk(4, 1) & Strided(3, 9), 1), (Chunk(4, 0) | Strided(2, 4), 4)], ids=repr
)
def test_a_new_mask_streams(mask: Mask, step: int) -> None:
    """The stream asks the new mask its look-ahead, its first key and its part between a step and the cache:
    it emits what the whole-utterance forward computes, keeping a bounded cache."""
    torch.manual_seed(1)
    adapter = SpeechAdapter(d_model=32, channels=8, mask=mask).eval()
    encoder = Encoder(32, 4, 2, 64).eval()
    audio = torch.randn(1, 6000) * 0.3
    tokens = adapter({"waveform": audio, "lengths": torch.tensor([6000])})
    full = encoder(tokens.x, tokens.mask)
    stream = SpeechStream(adapter, encoder, max_cache=math.lcm(step, 16) + 16)
    assert stream.step == step
    torch.testing.assert_close(stream_in_pieces(stream, audio, 0), full, atol=1e-5, rtol=1e-5)
