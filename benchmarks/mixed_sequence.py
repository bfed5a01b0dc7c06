"""The mixed-sequence case: one sequence of audio frames, image patches, text and bottleneck tokens.

4,096 audio frames under ``Window(32, 32)``, a 64 x 64 patch grid under ``Grid(64, 64, kernel=7)``,
512 text tokens under ``Causal()`` and 16 bottleneck tokens, laid out as one
:class:`~attnmm.masks.Segments` sequence of L = 8,720 positions: each modality attends itself (under
its own mask) and the bottleneck; the bottleneck attends everything (fusion through bottleneck
tokens). Forward + backward, H = 4, E = 64, fp32, against SDPA with the dense (L, L) bool mask.
"""

from __future__ import annotations

from typing import Any

import torch

from attnmm.masks import Causal, Grid, Mask, Segments, Window

Inputs = dict[str, Any]

SIZES = [4096, 64 * 64, 512, 16]  # audio, image, text, bottleneck
LENGTH = sum(SIZES)
HEADS, DIM = 4, 64


def mask() -> Mask:
    within = [Window(32, 32), Grid(64, 64, kernel=7), Causal(), None]
    bottleneck = len(SIZES) - 1
    links = [[c in (a, bottleneck) for c in range(len(SIZES))] for a in range(bottleneck)]
    links.append([True] * len(SIZES))  # the bottleneck attends every segment
    return Segments(SIZES, within=within, links=links)


MASK = mask()


def build() -> Inputs:
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, HEADS, LENGTH, DIM, generator=g).requires_grad_(True) for _ in range(3))
    return {"q": q, "k": k, "v": v, "grad": torch.randn(1, HEADS, LENGTH, DIM, generator=g)}


def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
    """Speed, and attnmm's peak against the dense (L, L) bool mask the peer is handed (76 MB); also
    the part of the peak beyond the output and the three input gradients, which any method returns
    (4 x 8.9 MB = 0.47 x the mask, so the peak target cannot fall below that)."""
    dense = LENGTH * LENGTH  # bytes of the bool mask
    returned = 4 * HEADS * LENGTH * DIM * 4  # output, d_q, d_k, d_v in fp32
    text = (
        f"{tp / to:.1f}x faster, {mp / max(mo, 1.0):.1f}x less memory; attnmm peak = {mo / dense:.2f} x the mask "
        f"({max(mo - returned, 0) / dense:.2f} x beyond the output and gradients)"
    )
    return text, tp / to >= 10 and mo <= dense / 4
