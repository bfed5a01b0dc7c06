"""Helpers for the streaming tests: audio pushed into a stream in random pieces."""

from __future__ import annotations

import torch

from attnmm.adapters import SpeechStream


def stream_in_pieces(stream: SpeechStream, audio: torch.Tensor, seed: int) -> torch.Tensor:
    """Push ``audio`` (B, T) in random pieces, from one sample to half a second, then flush."""
    g = torch.Generator().manual_seed(seed)
    pieces, start = [], 0
    while start < audio.size(1):
        n = int(torch.randint(1, 4000, (1,), generator=g))
        pieces.append(stream.push(audio[:, start : start + n]))
        start += n
    pieces.append(stream.flush())
    return torch.cat(pieces, 1)
