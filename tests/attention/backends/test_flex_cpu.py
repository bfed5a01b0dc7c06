"""The FlexAttention backend on the CPU, for inference: values against the reference, block masks
shared by equal masks, one compiled kernel for many lengths, and training refused by name."""

from __future__ import annotations

import pytest
import torch
from _oracle import planned

from attnmm import attend
from attnmm.attention.backends import BackendRefusedError, flex
from attnmm.attention.backends.flex import flex_available
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Problem
from attnmm.masks import Causal, Documents, Grid, Mask, Padding, Window

pytestmark = pytest.mark.skipif(flex_available("cpu") is not None, reason=str(flex_available("cpu")))



def _flex() -> flex.FlexBackend:
    """The registered flex backend, which keeps the compiled kernel and the block masks."""
    from attnmm.attention.backends import get_backend

    backend = get_backend("flex")
    assert isinstance(backend, flex.FlexBackend)
    return backend

def test_cpu_inference_matches_the_reference() -> None:
    g = torch.Generator().manual_seed(0)
    cases = [
        (Documents([100, 0, 250, 90]) & Causal(), 440),
        (Grid(16, 16, 5), 256),
        (Window(8, 8) & ~Window(0, 0), 150),
    ]
    with torch.no_grad():
        for mask, L in cases:
            q, k, v = (torch.randn(2, 2, L, 16, generator=g) for _ in range(3))
            out = attend(q, k, v, mask, backend="flex")
            torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=2e-5, rtol=2e-4)


def test_twenty_lengths_compile_at_most_twice() -> None:
    from torch._dynamo.utils import counters

    g = torch.Generator().manual_seed(1)
    graphs = counters["stats"]["unique_graphs"]
    mask = Window(16, 4)
    with torch.no_grad():
        for L in torch.randint(20, 1000, (20,), generator=g).tolist():  # a batch of new length each time
            q, k, v = (torch.randn(2, 2, L, 16, generator=g) for _ in range(3))
            out = attend(q, k, v, mask, backend="flex")
        torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=2e-5, rtol=2e-4)
    assert counters["stats"]["unique_graphs"] - graphs <= 2  # dynamic shapes (below one block: the second)


@pytest.mark.parametrize("order", ["window first", "padding first"])
def test_per_item_masks_for_twenty_lengths_compile_at_most_twice(order: str) -> None:
    from torch._dynamo.utils import counters

    g = torch.Generator().manual_seed(2)
    graphs = counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for L in torch.randint(20, 700, (20,), generator=g).tolist():  # new lengths, new per-item lengths
            lengths = torch.randint(0, L + 1, (2,), generator=g)
            mask = Window(16, 4) & Padding(lengths) if order == "window first" else Padding(lengths) & Window(16, 4)
            q, k, v = (torch.randn(2, 2, L, 16, generator=g) for _ in range(3))
            out = attend(q, k, v, mask, backend="flex")
            torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=2e-5, rtol=2e-4)
    assert counters["stats"]["unique_graphs"] - graphs <= 2
    assert repr(Window(16, 4) & Padding([3, 4])) == "Window(left=16, right=4) & Padding(lengths=[3, 4])"  # as written


def test_a_per_item_kernel_the_cpu_compiler_fails_on_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("C++ compile error")  # what torch's code generator raises for some masks

    monkeypatch.setattr(_flex(), "compiled", broken)
    q = torch.randn(2, 1, 64, 16)
    mask = Window(8, 0) & Padding([64, 30])
    with torch.no_grad(), pytest.raises(ValueError, match=r"failed to compile the kernel of the per-item mask"):
        attend(q, q, q, mask, backend="flex")
    with torch.no_grad(), pytest.raises(RuntimeError, match="C\\+\\+ compile error"):
        attend(q, q, q, Window(8, 0), backend="flex")  # a shared mask: torch's own error, unchanged


def test_block_masks_are_shared_by_equal_masks() -> None:
    _flex().block_masks.clear()
    q = torch.randn(2, 1, 200, 16)
    with torch.no_grad():
        for _ in range(3):  # a new but equal mask per batch, as adapters build them
            attend(q, q, q, Documents([120, 80]) & Causal(), backend="flex")
        attend(q, q, q, Documents([100, 100]) & Causal(), backend="flex")
    assert len(_flex().block_masks) == 2


def test_training_and_other_dtypes_are_refused_on_the_cpu() -> None:
    backend = flex.FlexBackend()
    q = torch.randn(1, 1, 32, 16, requires_grad=True)
    window = Window(4, 0)
    training = planned(q, q, q, window, 0.25, 0.0, "softmax", None, False, False)
    assert "no FlexAttention backward for the CPU (inference only there)" in backend.unsupported(*training)
    x = q.detach()
    half = x.bfloat16()
    assert "float32 only there" in backend.unsupported(*planned(half, half, half, window, 0.25, 0.0, "softmax",
                                                               None, False, False))
    padded = planned(x, x, x, window & Padding([20]), 0.25, 0.0, "softmax", None, False, False)
    assert backend.unsupported(*padded) is None  # per-item masks run on the CPU too
    with pytest.raises(ValueError, match="cannot compute this attention: torch compiles no FlexAttention backward"):
        attend(q, q, q, window, backend="flex")


def _tile_problem(mask: Mask, L: int, S: int, B: int = 2, H: int = 3) -> tuple[Problem, Forms]:
    q, k = torch.randn(B, H, L, 16), torch.randn(B, H, S, 16)
    return planned(q, k, k, mask, 0.25, 0.0, "softmax", None, False, False)


@pytest.mark.parametrize(
    ("mask", "L", "S"),
    [
        (Window(64, 64), 1000, 1000),
        (Window(300, 0), 700, 900),  # L != S
        (Window(3, 3) & ~Window(0, 0), 129, 129),  # one row past a tile
        (Documents([100, 0, 250, 90, 300]) & Causal(), 740, 740),
        (Documents([128, 256, 130]) & Window(40, 0), 514, 514),
        (Window(5, 5), 400, 300),  # the last queries have no key
        (Grid(24, 24, 5), 576, 576),
        (Grid(20, 20, 3) | Window(0, 0), 400, 400),
        (Window(50, 0) & Padding([300, 0]), 300, 300),  # per item, one item empty (counted on CUDA)
        (Grid(16, 16, 3) & Padding([256, 100]), 256, 256),
    ],
)
def test_tiles_of_the_cost_match_the_block_mask(mask: Mask, L: int, S: int) -> None:
    from torch.nn.attention.flex_attention import create_block_mask

    _flex().tile_counts.clear()
    tiles, positions, partial = _flex().tiles(*_tile_problem(mask, L, S))
    items = mask.structure.batch_size
    block = create_block_mask(flex.as_mask_mod(mask), items, None, L, S, device="cpu", BLOCK_SIZE=flex.BLOCK_SIZE)
    full = int(block.full_kv_num_blocks.sum()) if block.full_kv_num_blocks is not None else 0
    copies = 2 if items is None else 1  # a shared mask: the same tiles in both items of the batch
    assert tiles == copies * (int(block.kv_num_blocks.sum()) + full)
    # positions: of every tile within L x S; partial: of the tiles the kernel applies mask_mod in
    dense = mask.dense(L, S).view(-1, L, S)
    T = flex.BLOCK_SIZE
    want_positions = want_partial = 0
    for item in dense:
        for r in range(0, L, T):
            for c in range(0, S, T):
                tile = item[r : r + T, c : c + T]
                if tile.any():
                    want_positions += tile.numel()
                    want_partial += 0 if tile.all() else tile.numel()
    assert (positions, partial) == (copies * want_positions, copies * want_partial)


def test_cost_counts_a_build_and_a_compile_only_until_done(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _flex()
    flex.block_masks_clear()
    x = torch.randn(1, 2, 300, 16)
    problem = planned(x, x, x, Window(8, 8), 0.25, 0.0, "softmax", None, False, False)
    monkeypatch.setattr(_flex(), "compiled", None)  # as in a fresh process (restored after the test)
    terms = backend.cost_terms(*problem)
    assert terms[3] == 300 * 300 and terms[4] == 1e6
    with torch.no_grad():
        attend(x, x, x, Window(8, 8), backend="flex")  # an equal mask: its block mask is cached now
    assert _flex().compiled is not None
    assert backend.cost_terms(*problem)[3:] == (0.0, 0.0)


def test_dispatch_takes_flex_on_the_cpu_by_its_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.attention import planner as _dispatch
    from attnmm.attention.backends import _calibration

    x = torch.randn(1, 2, 512, 16)
    mask = Window(32, 32)
    problem = planned(x, x, x, mask, 0.25, 0.0, "softmax", None, False, False)
    with torch.no_grad():
        attend(x, x, x, mask, backend="flex")  # compiled, block mask cached
        assert _dispatch.candidates(*problem)[0].name != "flex"  # its estimate is above another backend's here
        costs = {**_calibration.COSTS["cpu"], "flex": {"infer": (1e-7, 0.0, 0.0, 0.0, 0.0, 1.0)}}
        monkeypatch.setitem(_calibration.COSTS, "cpu", costs)
        assert _dispatch.candidates(*problem)[0].name == "flex"  # estimated cheapest: dispatch takes it
        flex.block_masks_clear()  # ... unless a block-mask build is due, which the estimate counts
        costs["flex"] = {"infer": (1e-7, 0.0, 0.0, 0.0, 1.0, 1.0)}
        assert _dispatch.candidates(*problem)[0].name != "flex"
        with torch.enable_grad():
            training = planned(x.requires_grad_(), x, x, mask, 0.25, 0.0, "softmax", None, False, False)
            assert "flex" not in [b.name for b in _dispatch.candidates(*training)]


def test_on_this_cpu_flex_is_never_the_cheapest_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the docs say of the calibrated CPU constants: even compiled and with its block mask
    cached, flex's estimate stays above another backend's on every inference problem of the
    calibration (rerun ``python -m benchmarks.calibrate`` and revisit docs/attention.md if not)."""
    from attnmm.attention import planner as _dispatch
    from benchmarks import calibrate

    monkeypatch.setattr(_flex(), "compiled", lambda *args, **kwargs: None)  # counted as compiled
    seen = 0
    with torch.no_grad():
        for label, q, k, v, mask in calibrate.problems():
            problem = calibrate._problem(q, k, v, mask, "infer")
            if flex.FlexBackend().unsupported(*problem) is not None:
                continue
            key = flex.block_mask_key(problem[0])
            monkeypatch.setitem(_flex().block_masks, key, (problem[0].effective_mask, None))
            ranked = _dispatch.candidates(*problem)
            assert ranked[0].name != "flex", label
            seen += 1
    assert seen >= 10


def test_past_the_recompile_limit_the_backend_raises_instead_of_running_uncompiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch runs a function past its recompile limit uncompiled: for flex_attention that materialises every score
    flex.reset_compiled()
    monkeypatch.setattr(flex, "RECOMPILE_LIMIT", 1)
    q = torch.randn(1, 1, 64, 16)
    try:
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):
            torch.testing.assert_close(attend(q, q, q, Window(8, 0), backend="flex"),
                                       attend(q, q, q, Window(8, 0), backend="reference"), atol=2e-5, rtol=2e-4)
            with pytest.raises(BackendRefusedError, match="RECOMPILE_LIMIT"):
                attend(q, q, q, Grid(8, 8, 3), backend="flex")  # another family of masks: a second kernel
            problem = planned(q, q, q, Window(8, 0), 0.25, 0.0, "softmax", None, False, False)
            assert "RECOMPILE_LIMIT" in str(_flex().check(*problem))  # refused from now on
    finally:
        flex.reset_compiled()
    assert _flex().exhausted is None


def test_dispatch_chooses_again_when_flex_refuses_as_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.attention.backends import _calibration

    flex.reset_compiled()
    costs = {**_calibration.COSTS["cpu"], "flex": {"infer": (1e-9, 0.0, 0.0, 0.0, 0.0, 0.0)}}
    monkeypatch.setitem(_calibration.COSTS, "cpu", costs)  # flex estimated cheapest: dispatch takes it
    monkeypatch.setattr(flex, "RECOMPILE_LIMIT", 1)
    q = torch.randn(1, 2, 64, 16)
    try:
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):
            attend(q, q, q, Window(8, 0))  # flex's one kernel
            assert _flex().exhausted is None
            out = attend(q, q, q, Grid(8, 8, 3))  # a second kernel: flex refuses, another backend computes it
            torch.testing.assert_close(out, attend(q, q, q, Grid(8, 8, 3), backend="reference"), atol=2e-5, rtol=2e-4)
            assert _flex().exhausted is not None
    finally:
        flex.reset_compiled()


def test_masks_go_to_the_kernels_device_with_their_parts() -> None:
    from attnmm.attention.backends.flex import on_device
    from attnmm.masks import Segments

    def devices(mask: object) -> set[str]:
        found: set[str] = set()

        def walk(value: object) -> None:
            if isinstance(value, torch.Tensor):
                found.add(value.device.type)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    walk(v)
            elif hasattr(value, "mask_mod"):
                for v in vars(value).values():
                    walk(v)

        walk(mask)
        return found

    masks = [Window(32, 0) & Padding([300, 0]), Documents([100, 0, 150, 50]) & Causal(),
             Segments([10, 12, 4], within=[Window(2, 2), Causal(), None], links="full")]
    for mask in masks:
        moved = on_device(mask, "meta")
        assert devices(mask) == {"cpu"} and devices(moved) == {"meta"}  # a copy: the mask itself unchanged
        assert on_device(mask, "cpu") is mask  # already there: the mask itself
