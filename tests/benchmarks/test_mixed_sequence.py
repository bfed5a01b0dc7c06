"""The mixed-sequence benchmark's mask: each modality attends itself and the bottleneck, the
bottleneck attends everything."""

from __future__ import annotations

import torch

from attnmm import attend
from attnmm.masks import Causal, Grid, Window
from benchmarks import mixed_sequence as bench
from benchmarks._cases import get_case


def test_blocks_of_the_mask() -> None:
    L = bench.LENGTH
    assert L == 8720
    dense = bench.MASK.dense(L, L)
    a, i, t, _ = bench.SIZES
    audio, image, text, neck = slice(0, a), slice(a, a + i), slice(a + i, a + i + t), slice(a + i + t, L)
    assert torch.equal(dense[audio, audio], Window(32, 32).dense(a, a))
    assert torch.equal(dense[image, image], Grid(64, 64, kernel=7).dense(i, i))
    assert torch.equal(dense[text, text], Causal().dense(t, t))
    for rows in (audio, image, text):
        assert dense[rows, neck].all()  # every modality attends the bottleneck
    assert dense[neck].all()  # the bottleneck attends everything
    assert not dense[audio, image].any() and not dense[audio, text].any()
    assert not dense[image, audio].any() and not dense[image, text].any()
    assert not dense[text, audio].any() and not dense[text, image].any()
    assert bench.MASK.nnz(L) == int(dense.sum())


def test_case_equals_the_dense_peer_on_a_small_copy() -> None:
    """The same construction at a small size: attend equals SDPA with the dense mask."""
    from attnmm.masks import Segments

    sizes = [6, 9, 4, 2]
    within = [Window(1, 1), Grid(3, 3, kernel=3), Causal(), None]
    links = [[c in (a, 3) for c in range(4)] for a in range(3)] + [[True] * 4]
    mask = Segments(sizes, within=within, links=links)
    L = sum(sizes)
    q, k, v = (torch.randn(1, 2, L, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(L, L))
    torch.testing.assert_close(attend(q, k, v, mask), want)


def test_verdict_and_registration() -> None:
    case = get_case("mixed")
    assert case.build is bench.build
    text, met = bench.verdict(20.0, 1.0, 100e6, 1e6)
    assert met and "20.0x faster" in text
    assert not bench.verdict(20.0, 1.0, 100e6, float(bench.LENGTH**2))[1]  # as much memory as the mask
    assert not bench.verdict(5.0, 1.0, 100e6, 1e6)[1]
