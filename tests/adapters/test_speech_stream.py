"""Streaming under the Chunk mask equals the whole-utterance forward through every layer."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import SpeechAdapter, SpeechStream
from attnmm.attention import Encoder
from attnmm.masks import Chunk, Window


@pytest.mark.parametrize("size,left_chunks,num_samples,seed", [(4, 1, 8000, 0), (3, 2, 9137, 1), (8, 0, 5000, 2)])
def test_stream_equals_full_forward(size: int, left_chunks: int, num_samples: int, seed: int) -> None:
    torch.manual_seed(seed)
    adapter = SpeechAdapter(d_model=32, channels=8, mask=Chunk(size, left_chunks)).eval()
    encoder = Encoder(32, 4, 3, 64).eval()
    audio = torch.randn(2, num_samples) * 0.3
    tokens = adapter({"waveform": audio, "lengths": torch.tensor([num_samples, num_samples])})
    full = encoder(tokens.x, tokens.mask)  # (B, L, D)

    stream = SpeechStream(adapter, encoder, batch_size=2)
    g = torch.Generator().manual_seed(seed)
    pieces, start = [], 0
    while start < num_samples:  # random piece sizes, from a few samples to half a second
        n = int(torch.randint(1, 4000, (1,), generator=g))
        pieces.append(stream.push(audio[:, start : start + n]))
        start += n
    pieces.append(stream.flush())
    streamed = torch.cat(pieces, 1)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=1e-5)


def test_stream_emits_whole_chunks_only() -> None:
    adapter = SpeechAdapter(d_model=16, channels=4, mask=Chunk(5, 1)).eval()
    stream = SpeechStream(adapter, Encoder(16, 2, 1, 32).eval())
    sizes = [stream.push(torch.randn(1, 800)).size(1) for _ in range(10)]
    assert all(s % 5 == 0 for s in sizes) and sum(sizes) > 0


def test_stream_needs_chunk_mask() -> None:
    adapter = SpeechAdapter(d_model=16, mask=Window(4, 2))
    with pytest.raises(ValueError, match="streaming needs a Chunk mask"):
        SpeechStream(adapter, Encoder(16, 2, 1, 32))
    with pytest.raises(ValueError, match=r"audio must be \(B=1, T_new\)"):
        SpeechStream(adapter, Encoder(16, 2, 1, 32), chunk=Chunk(4, 1)).push(torch.randn(2, 10))
