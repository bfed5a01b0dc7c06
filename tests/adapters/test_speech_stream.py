"""Streaming equals the whole-utterance forward through every layer, under every mask whose look-ahead
ends at a block boundary; other masks are refused with the mask named."""

from __future__ import annotations

import re

import pytest
import torch
from _streaming import stream_in_pieces

from attnmm.adapters import SpeechAdapter, SpeechStream
from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Mask, Padding, Window
from attnmm.nn import Encoder


@pytest.mark.parametrize(
    "mask,step,num_samples,seed",
    [
        (Chunk(4, 1), 4, 8000, 0),
        (Chunk(3, 2), 3, 9137, 1),
        (Chunk(8, 0), 8, 5000, 2),
        (Chunk(4, 1) | Causal(), 4, 8000, 3),
        (Chunk(4, 1) & Window(2, 0), 1, 8000, 4),
        (Chunk(3, 1) & Window(2, 3), 3, 7000, 5),
        (Chunk(4, 2) & Causal(), 1, 6000, 6),
        (Chunk(4, 0) | Chunk(6, 1), 12, 9000, 7),
        (Chunk(5, 1) & ~Window(0, 0), 5, 6000, 8),
        (Window(6, 0), 1, 5000, 9),
        (Causal() | (Chunk(2, 0) & Window(0, 1)), 2, 5000, 10),
    ],
    ids=repr,
)
def test_stream_equals_full_forward(mask: Mask, step: int, num_samples: int, seed: int) -> None:
    torch.manual_seed(seed)
    adapter = SpeechAdapter(d_model=32, channels=8, mask=mask).eval()
    encoder = Encoder(32, 4, 3, 64).eval()
    audio = torch.randn(2, num_samples) * 0.3
    tokens = adapter({"waveform": audio, "lengths": torch.tensor([num_samples, num_samples])})
    full = encoder(tokens.x, tokens.mask)  # (B, L, D)

    stream = SpeechStream(adapter, encoder, batch_size=2)
    assert stream.step == step
    streamed = stream_in_pieces(stream, audio, seed)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=1e-5)
    # the stream resets at flush: a second utterance streams the same
    torch.testing.assert_close(stream_in_pieces(stream, audio, seed + 100), full, atol=1e-5, rtol=1e-5)


def test_stream_drops_the_adapters_padding() -> None:
    torch.manual_seed(0)
    adapter = SpeechAdapter(d_model=32, channels=8, mask=Chunk(3, 1) & Window(4, 1)).eval()
    encoder = Encoder(32, 4, 2, 64).eval()
    audio = torch.randn(1, 6000) * 0.3
    tokens = adapter({"waveform": audio, "lengths": torch.tensor([6000])})
    stream = SpeechStream(adapter, encoder, mask=tokens.mask)  # Padding(lengths=[...]) & Chunk & Window
    assert repr(stream.mask) == repr(adapter.mask)
    full = encoder(tokens.x, tokens.mask)  # (B, L, D)
    torch.testing.assert_close(stream_in_pieces(stream, audio, 0), full, atol=1e-5, rtol=1e-5)


def test_stream_emits_whole_blocks_only() -> None:
    for mask, step in [(Chunk(5, 1), 5), (Chunk(2, 1) | Chunk(3, 0), 6)]:
        adapter = SpeechAdapter(d_model=16, channels=4, mask=mask).eval()
        stream = SpeechStream(adapter, Encoder(16, 2, 1, 32).eval())
        sizes = [stream.push(torch.randn(1, 800)).size(1) for _ in range(10)]
        assert all(s % step == 0 for s in sizes) and sum(sizes) > 0


@pytest.mark.parametrize(
    "mask,cached",
    [(Chunk(4, 1), 4), (Chunk(4, 2), 8), (Chunk(4, 1) & Window(2, 0), 2), (Chunk(4, 2) & Window(5, 3), 5)],
    ids=repr,
)
def test_cache_keeps_what_later_frames_attend(mask: Mask, cached: int) -> None:
    adapter = SpeechAdapter(d_model=16, channels=4, mask=mask).eval()
    stream = SpeechStream(adapter, Encoder(16, 2, 2, 32).eval())
    for _ in range(20):  # 2 s: 48 frames
        stream.push(torch.randn(1, 800))
        assert all(c.size(1) <= cached for c in stream._cache)
    assert all(c.size(1) == cached for c in stream._cache)


def test_unbounded_history_grows_or_hits_max_cache() -> None:
    mask = Chunk(4, 1) | Causal()
    adapter = SpeechAdapter(d_model=16, channels=4, mask=mask).eval()
    encoder = Encoder(16, 2, 1, 32).eval()
    stream = SpeechStream(adapter, encoder)
    stream.push(torch.randn(1, 8000))
    assert stream._cache[0].size(1) == stream._position == 20  # every frame so far
    capped = SpeechStream(adapter, encoder, max_cache=12)
    with pytest.raises(ValueError, match=re.escape(f"under {mask!r} the frames after ") + ".*raise max_cache"):
        for _ in range(10):
            capped.push(torch.randn(1, 800))
    bounded = SpeechStream(adapter, encoder, mask=Chunk(4, 1), max_cache=4)  # needs 4: fits
    bounded.push(torch.randn(1, 8000))


@pytest.mark.parametrize(
    "mask,why",
    [
        (Chunk(4, 1) | Window(0, 8), r"Window\(left=0, right=8\) lets query i attend key i \+ 8.*grows with depth"),
        (Window(4, 2), r"key i \+ 2"),
        (Padding([30]) & Window(16, 4), r"key i \+ 4"),
        (~Chunk(4, 1), "is a complement"),
        (Full(), "Full"),
        (Chunk(4, 1) | Full(), "Full"),
        (None, "full attention"),
        (Padding([30]), "full attention"),
        (Chunk(4, 1) & Documents([[8, 8], [4, 12]]), "depends on the batch item"),
        (Graph(torch.tensor([[0, 1], [1, 0]]), 2) & Chunk(4, 1), "not a mask over time frames"),
        (Grid(4, 4, 3) & Chunk(4, 1), "not a mask over time frames"),
    ],
    ids=repr,
)
def test_refuses_unbounded_look_ahead_naming_the_mask(mask: Mask | None, why: str) -> None:
    adapter = SpeechAdapter(d_model=16, mask=mask)
    with pytest.raises(ValueError, match=re.escape(f"SpeechStream cannot stream under {mask!r}: ") + f".*{why}"):
        SpeechStream(adapter, Encoder(16, 2, 1, 32))


def test_mask_argument_overrides_the_adapter_mask_and_audio_shape_is_checked() -> None:
    adapter = SpeechAdapter(d_model=16, mask=Window(4, 2))
    assert SpeechStream(adapter, Encoder(16, 2, 1, 32), mask=Chunk(4, 1)).step == 4
    with pytest.raises(ValueError, match=re.escape("cannot stream under Causal() | Window(left=0, right=1)")):
        SpeechStream(adapter, Encoder(16, 2, 1, 32), mask=Causal() | Window(0, 1))
    with pytest.raises(ValueError, match=r"audio must be \(B=1, T_new\)"):
        SpeechStream(adapter, Encoder(16, 2, 1, 32), mask=Chunk(4, 1)).push(torch.randn(2, 10))


def test_samples_for_is_the_front_end_inverse() -> None:
    adapter = SpeechAdapter(d_model=16)
    stream = SpeechStream(adapter, Encoder(16, 2, 1, 32), mask=Chunk(4, 1))
    for n in range(1, 30):
        need = stream.samples_for(n)
        assert int(adapter.num_frames(torch.tensor(need))) == n
        assert int(adapter.num_frames(torch.tensor(need - 1))) == n - 1
