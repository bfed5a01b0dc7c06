"""benchmarks/calibrate.py: its problems include long rows, its fit recovers the sparse backend's
constants, the row-length term included, from times that follow them (no timing), and FlexAttention's
rows count a block-mask build only where the block mask is rebuilt."""

from __future__ import annotations

import pytest
import torch

from attnmm.attention.backends import get_backend
from attnmm.attention.backends.flex import flex_available
from attnmm.masks import Window
from benchmarks import calibrate


def _sparse_rows() -> list[tuple[str, tuple[float, ...], float]]:
    sparse, rows = get_backend("sparse"), []
    for label, q, k, v, mask in calibrate.problems():
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        problem = calibrate._problem(*leaves, mask, "train")
        terms = sparse.cost_terms(*problem)
        if terms[1] <= 4 * calibrate.MAX_SCORES:
            rows.append((label, terms, 0.0))
    return rows


def test_the_problems_have_long_rows() -> None:
    per_row = [terms[3] / terms[1] for _, terms, _ in _sparse_rows() if terms[1]]
    assert max(per_row) >= 1024 and any(label.startswith("documents") for label, _, _ in _sparse_rows())


def test_the_fit_recovers_the_row_length_term() -> None:
    constants = (1e-4, 3e-4, 0.03, 0.02, 2e-4)
    rows = [
        (label, terms, constants[0] + sum(c * x * 1e-6 for c, x in zip(constants[1:], terms)))
        for label, terms, _ in _sparse_rows()
    ]
    fitted, error = calibrate.fit(rows)
    assert error < 1e-3
    assert fitted[4] == pytest.approx(constants[4], rel=1e-2)
    torch.testing.assert_close(torch.tensor(fitted[:2]), torch.tensor(constants[:2]), rtol=0.05, atol=0.0)


@pytest.mark.skipif(flex_available("cpu") is not None, reason=str(flex_available("cpu")))
def test_flex_rows_count_a_build_only_where_the_block_mask_is_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 200, 16, generator=g) for _ in range(3))
    monkeypatch.setattr(calibrate, "problems", lambda: [("window", q, k, v, Window(8, 8))])
    rows = calibrate.measure("flex", "infer", 0.0)
    assert [label for label, _, _ in rows] == ["window", "window, block mask rebuilt"]
    (_, cached, t0), (_, rebuilt, t1) = rows
    assert cached[3] == 0.0 and rebuilt[3] == 200 * 200  # the build's positions, only where it happens
    assert cached[:3] == rebuilt[:3] and cached[4] == rebuilt[4] == 0.0  # compiled by the first call
    assert t0 > 0 and t1 > 0
