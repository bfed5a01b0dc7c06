"""benchmarks.split_memory: the warm-up is the problem's kind, and the table renders from the store."""

from __future__ import annotations

import torch

from attnmm import attend
from benchmarks import mixed_sequence
from benchmarks.split_memory import DENSE, END, RETURNED, START, markdown, render_page, small_mask, summary


def test_the_warm_up_is_a_small_problem_of_the_same_kind() -> None:
    small, full = small_mask(), mixed_sequence.MASK
    assert small.num_segments == full.num_segments and small.offsets[-1] < full.offsets[-1] // 8
    assert [type(m).__name__ for m in small.within] == [type(m).__name__ for m in full.within]
    q = k = v = torch.randn(1, 2, small.offsets[-1], 4)
    torch.testing.assert_close(attend(q, k, v, small), attend(q, k, v, small, backend="reference"))


def test_the_page_section_is_the_stored_table() -> None:
    runs = [{"peak": RETURNED + int(f * DENSE), "held": 40_000_000} for f in (0.2, 0.25, 0.22)]
    assert abs(summary(runs)["beyond_x"] - 0.22) < 1e-6
    stored = {"machine": "m", "commit": "abc1234", "runs": runs}
    assert "0.20 / 0.22 / 0.25 x the mask" in markdown(stored)
    page = f"before\n{START}\nold\n{END}\nafter\n"
    once = render_page(page, stored)
    assert "abc1234" in once and "old" not in once and once.endswith("after\n")
    assert render_page(once, stored) == once


def test_the_documented_command_measures_in_a_fresh_process() -> None:
    """``python -m benchmarks.split_memory`` (one process here, nothing written): the first full-size call's
    peak lies above what any method returns and below the dense mask's four times over."""
    from benchmarks.split_memory import main

    stored = main(["--processes", "1", "--no-write"])
    (run,) = stored["runs"]
    assert RETURNED < run["peak"] < 4 * DENSE and run["held"] > 0
