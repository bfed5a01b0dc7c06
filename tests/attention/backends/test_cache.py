"""The masks' derived forms (pairs, CSR patterns, dense masks) are built once per forward and keyed by
content: equal masks built per batch share them, different ones never do."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.attention import Encoder
from attnmm.attention.backends import _cache
from attnmm.masks import Full, Graph, Grid, Padding, Window
from attnmm.masks._key import VALUE_KEY_ELEMENTS, content_key


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    _cache.clear()


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the masks' own enumerations and materialisations."""
    from attnmm.masks.base import Mask

    counts = {"pairs": 0, "dense": 0}
    pairs, dense = Mask.pairs, Mask.dense

    def counted_pairs(self, *args, **kwargs):
        counts["pairs"] += 1
        return pairs(self, *args, **kwargs)

    def counted_dense(self, *args, **kwargs):
        counts["dense"] += 1
        return dense(self, *args, **kwargs)

    monkeypatch.setattr(Mask, "pairs", counted_pairs)
    monkeypatch.setattr(Mask, "dense", counted_dense)
    return counts


def test_content_keys() -> None:
    assert content_key(Padding([3, 4]) & Window(4, 1)) == content_key(Padding(torch.tensor([3, 4])) & Window(4, 1))
    assert content_key(Padding([3, 4]) & Window(4, 1)) != content_key(Padding([3, 5]) & Window(4, 1))
    # the same allowed set composed in another order is another key (a miss, never a wrong hit)
    assert content_key(Padding([3, 4]) & Window(4, 1)) != content_key(Window(4, 1) & Padding([3, 4]))
    assert content_key(Window(4, 1)) != content_key(Window(1, 4))
    assert content_key(Grid(7, 7, 3)) == content_key(Grid(7, 7, 3))
    edges = torch.tensor([[0, 1], [1, 0]])
    assert content_key(Graph(edges, 2)) == content_key(Graph(edges.clone(), 2))
    assert content_key(Graph(edges, 2)) != content_key(Graph(edges.flip(0)[:, :1], 2))
    big = torch.zeros(VALUE_KEY_ELEMENTS + 1)
    assert content_key(big) == content_key(big) and content_key(big) != content_key(big.clone())
    before = content_key(big)
    big.add_(1)  # in place: a new version
    assert content_key(big) != before


@pytest.mark.parametrize("return_weights", [True, False])
def test_an_encoder_forward_builds_the_mask_once(monkeypatch: pytest.MonkeyPatch, return_weights: bool) -> None:
    # adapters build a new mask per batch: every layer of a forward, and a later forward over the same
    # lengths, must reuse one enumeration (the pairs) and one dense mask
    encoder = Encoder(d_model=16, num_heads=2, num_layers=4, dim_feedforward=32, dropout=0.0)
    x = torch.randn(3, 12, 16)  # (B, L, D)
    lengths = [12, 7, 3]
    counts = _counting(monkeypatch)
    encoder(x, Padding(torch.tensor(lengths)) & Window(4, 1), return_weights=return_weights)
    assert counts["pairs"] <= 1 and counts["dense"] <= 1, counts
    if return_weights:
        assert counts["pairs"] == 1
    first = dict(counts)
    encoder(x, Padding(torch.tensor(lengths)) & Window(4, 1), return_weights=return_weights)  # a fresh, equal mask
    assert counts == first
    encoder(x, Padding(torch.tensor([12, 6, 3])) & Window(4, 1), return_weights=return_weights)  # other lengths
    assert sum(counts.values()) > sum(first.values())


@pytest.mark.parametrize("backend", ["sparse", "sdpa_mask", "reference"])
def test_each_backend_builds_once_per_forward(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    q = torch.randn(2, 2, 10, 4, requires_grad=True)
    counts = _counting(monkeypatch)
    built = dict(_cache.builds)
    outs = [attend(q, q, q, Padding([10, 6]) & Window(2, 1), backend=backend) for _ in range(4)]  # four "layers"
    torch.stack(outs).sum().backward()
    assert counts["pairs"] + counts["dense"] == 1, counts
    assert sum(_cache.builds.values()) - sum(built.values()) <= 2  # the pairs and, for sparse, their pattern


def test_cached_forms_give_the_reference_result() -> None:
    q, k, v = (torch.randn(2, 2, 9, 4, dtype=torch.float64) for _ in range(3))
    for lengths in ([9, 4], [9, 4], [5, 9]):
        mask = Padding(lengths) & Window(2, 2)
        ref = attend(q, k, v, mask, backend="reference")
        for backend in ("sparse", "sdpa_mask", "band"):
            torch.testing.assert_close(attend(q, k, v, mask, backend=backend), ref)
    assert attend(q, k, v, Full(), backend="sparse").shape == (2, 2, 9, 4)


def test_large_dense_masks_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "DENSE_ELEMENTS", 10)  # below this mask's 2 * 8 * 8 entries
    q = torch.randn(2, 2, 8, 4)
    built = _cache.builds["dense"]
    for _ in range(3):
        attend(q, q, q, Padding([8, 5]) & Window(1, 1), backend="sdpa_mask")
    assert _cache.builds["dense"] - built == 3
