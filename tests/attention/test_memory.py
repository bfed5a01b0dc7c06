"""attend() refuses, before allocating, an attention that cannot fit in memory, with an estimate and a hint."""

from __future__ import annotations

import re
import time
from unittest import mock

import pytest
import torch
from _strategies import sequence_masks
from hypothesis import given
from hypothesis import strategies as st

import attnmm.attention.backends._memory as memory
from attnmm import attend
from attnmm.attention import AttentionMemoryError
from attnmm.attention.planner import forms_of
from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, Window, base


def huge(L: int, B: int = 1, H: int = 1, E: int = 8) -> torch.Tensor:
    """A (B, H, L, E) tensor of zeros that takes no memory (one element, broadcast)."""
    return torch.zeros(1, 1, 1, E).expand(B, H, L, E)


def test_a_sparse_form_that_cannot_fit_fails_early() -> None:
    mask = Grid(2**17, 2**17, kernel=31)  # 2**34 patches, about 1.6e13 allowed pairs
    P = mask.num_patches
    assert mask.nnz_bound(P, P) > 10**13  # counted per axis, without the pairs
    q = huge(P)
    start = time.perf_counter()
    with pytest.raises(AttentionMemoryError) as info:
        attend(q, q, q, mask)
    assert time.perf_counter() - start < 10  # nothing was enumerated
    err = info.value
    assert isinstance(err, MemoryError) and err.needed > err.available > 0
    message = str(err)
    assert "Grid(height=131072, width=131072, kernel=31)" in message and "L=17179869184" in message
    assert "sparse form of the mask (up to 1.65e+13 allowed pairs)" in message
    assert " GB for " in message and " GB available on cpu" in message
    assert "use a sparser mask" in message and "a smaller batch" in message


@pytest.mark.parametrize(
    "mask, kwargs, backend, hint",
    [
        (Full() & Padding([2**20]), {}, "sdpa_mask", "dense (B, L, S) tensor"),
        (Window(2**19, 2**19), {}, "band", "narrower band"),
        (Full(), {"score": "relu"}, "reference", "materialises the (B, H, L, S) scores"),
        (~Causal(), {}, None, "sparser mask"),  # its sparse form filters every (i, j)
    ],
    ids=repr,
)
def test_dense_or_wide_working_memory_fails_early(mask: Mask, kwargs: dict, backend: str | None, hint: str) -> None:
    q = torch.zeros(1, 1, 1, 8, requires_grad=True).expand(1, 1, 2**20, 8)  # training: weights kept for backward
    with pytest.raises(AttentionMemoryError, match=re.escape(hint)) as info:
        attend(q, q, q, mask, **kwargs)
    if backend is not None:
        assert f"for backend {backend!r}" in str(info.value)


def test_band_inference_holds_pieces_only() -> None:
    # without a gradient the band kernel keeps nothing for backward: a piece of rows and its scores
    from attnmm.attention.backends import get_backend
    from attnmm.attention.problem import Problem

    q = huge(2**20)
    band = get_backend("band")
    wide = Problem.of(q, q, q, Window(2**19, 2**19), 1.0, 0.0, "softmax", None, False, False)
    assert band.memory_bytes(wide, forms_of(wide)) < 2**31  # a block's window of 2**20 scores: not the (L, w) band
    narrow = Problem.of(q, q, q, Window(64, 64), 1.0, 0.0, "softmax", None, False, False)
    assert band.memory_bytes(narrow, forms_of(narrow)) - 2**20 * 8 * 4 < 2**24  # beyond the output: under 16 MB


def test_explicit_backend_is_checked_too() -> None:
    q = huge(2**20)
    with pytest.raises(AttentionMemoryError, match="backend 'reference'"):
        attend(q, q, q, Window(1, 1), backend="reference")


def test_the_estimate_is_compared_with_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    q = torch.randn(2, 3, 40, 8)
    mask = Grid(5, 8, 3) & Padding([40, 20])
    monkeypatch.setattr(memory, "SMALL_BYTES", 0)  # check even tiny problems
    monkeypatch.setattr(memory, "available_bytes", lambda device, reader=None: 10**12)
    attend(q, q, q, mask)  # fits
    monkeypatch.setattr(memory, "available_bytes", lambda device, reader=None: 1000)
    with pytest.raises(AttentionMemoryError, match=r"would need about 0\.\d MB .* more than the 0\.0 MB available"):
        attend(q, q, q, mask)
    monkeypatch.setattr(memory, "available_bytes", lambda device, reader=None: None)  # unknown: nothing refused
    attend(q, q, q, mask)


def test_ordinary_sizes_never_ask_for_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(device: torch.device, reader: object = None) -> int:
        raise AssertionError("available memory queried for a small problem")

    monkeypatch.setattr(memory, "available_bytes", forbidden)
    x = torch.randn(2, 4, 64, 16)
    for mask in [None, Causal(), Window(4, 4) & Padding([64, 30]), Chunk(8, 1), Grid(8, 8, 3), ~Causal()]:
        attend(x, x, x, mask)
        attend(x, x, x, mask, score="relu", return_weights=True)
    nodes = torch.randn(50, 2, 8)
    attend(nodes, nodes, nodes, Graph(torch.randint(0, 50, (2, 200)), 50), bias=None)


def test_masks_without_a_bound_are_not_refused() -> None:
    class Diagonal(Mask):  # a toy mask with no nnz_bound
        def mask_mod(self, b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
            return q_idx == kv_idx

        def _pairs(self, num_rows, num_cols, batch_size, device):  # type: ignore[no-untyped-def]
            from attnmm.masks import Pairs

            i = torch.arange(min(num_rows, num_cols), device=device)
            return Pairs(i, i, None, num_rows, num_cols)

    assert Diagonal().nnz_bound(10**9) is None
    x = torch.randn(1, 1, 6, 4)
    torch.testing.assert_close(attend(x, x, x, Diagonal()), x)


def test_available_memory_is_known_on_cpu() -> None:
    available = memory.available_bytes(torch.device("cpu"))
    assert available is not None and available > 0


@given(st.data(), st.integers(1, 3), st.integers(0, 9), st.integers(0, 9))
def test_bounds_from_the_band_hold(data: st.DataObject, B: int, L: int, S: int) -> None:
    # past EXACT_COUNT_ROWS query rows, interval masks bound their count from the band in O(1)
    mask = data.draw(sequence_masks(B, S, depth=3))
    batch = B if mask.batched else None
    with mock.patch.object(base, "EXACT_COUNT_ROWS", 0):
        bound = mask.nnz_bound(L, S, batch)
    assert bound is None or bound >= mask.nnz(L, S, batch)


@given(st.data(), st.integers(0, 3), st.integers(0, 3), st.integers(0, 300), st.integers(0, 300))
def test_the_quick_ceiling_bounds_every_estimate(data: st.DataObject, B: int, H: int, L: int, S: int) -> None:
    # check_backend skips problems whose ceiling is small: it must bound every built-in backend's estimate
    from attnmm.attention.backends import get_backend, list_backends
    from attnmm.attention.problem import Problem

    mask = data.draw(st.sampled_from([None, Window(3, 1), Chunk(16, 2), Window(L, S)]))
    E, Ev = data.draw(st.integers(0, 64)), data.draw(st.integers(0, 64))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float16]))
    q, k, v = huge(L, B, H, E).to(dtype), huge(S, B, H, E).to(dtype), huge(S, B, H, Ev).to(dtype)
    problem = Problem.of(q, k, v, mask, scale=1.0, dropout_p=data.draw(st.sampled_from([0.0, 0.5])), score="softmax",
                      bias=None, return_weights=data.draw(st.booleans()), packed=False)
    forms = forms_of(problem)
    block = data.draw(st.sampled_from([None, 1, 3, 64]))
    ceiling = memory.ceiling_bytes(problem)
    for name in list_backends():
        backend = get_backend(name)
        if name == "band" and (mask is None or backend.unsupported(problem, forms) is not None):
            continue
        backend.block = block if name == "band" else getattr(backend, "block", None)  # type: ignore[attr-defined]
        try:
            assert backend.memory_bytes(problem, forms) <= ceiling, name
        finally:
            if name == "band":
                backend.block = None  # type: ignore[attr-defined]


def test_a_large_sparse_graph_is_not_refused() -> None:
    # N * N pairs would not fit, but the mask bounds its pairs by its edges
    N = 10**6
    mask = Graph(torch.tensor([[0, 1, 2, N - 1], [1, 2, 0, 0]]), N)
    x = torch.zeros(1, 1, 8).expand(N, 1, 8)  # (N, H, E) packed, one stored element
    out, weights = attend(x, x, x, mask, bias=torch.zeros(4), return_weights=True)
    assert out.shape == (N, 1, 8) and weights.values.shape == (4, 1)


def test_relative_position_bias_checks_the_pairs_it_enumerates() -> None:
    from attnmm.nn import RelativePositionBias

    rel = RelativePositionBias(num_heads=2, max_offset=3)
    message = r"mask Window\(left=3, right=3\) \(L=1099511627776, S=1099511627776\) would need .* sparse form"
    with pytest.raises(AttentionMemoryError, match=message):
        rel(Window(3, 3), 2**40)
    assert rel(Window(3, 3), 10).shape == (7 * 10 - 12, 2)


def test_a_reading_of_the_cpu_memory_is_reused_briefly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query segment of a split and every layer asks for the free memory: one reading of a plan's
    reader serves the asks of the next READING_SECONDS, then the files are read again."""
    readings = iter([1000, 2000])
    clock = [100.0]
    monkeypatch.setattr(memory, "_read_cpu_available", lambda: next(readings))
    monkeypatch.setattr(memory.time, "monotonic", lambda: clock[0])
    reader = memory.MemoryReader()
    cpu = torch.device("cpu")
    assert memory.available_bytes(cpu, reader) == 1000
    clock[0] += memory.READING_SECONDS / 2
    assert memory.available_bytes(cpu, reader) == 1000  # reused
    clock[0] += memory.READING_SECONDS
    assert memory.available_bytes(cpu, reader) == 2000  # read again
