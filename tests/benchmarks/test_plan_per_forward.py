"""benchmarks.plan_per_forward: both sides compute the same step, and the table renders."""

from __future__ import annotations

import torch

import attnmm.attention.planner as dispatch
from benchmarks.plan_per_forward import END, START, _encoder_step, markdown, measure, per_layer_dispatch, render_page


def test_per_layer_dispatch_switches_the_sharing_off(monkeypatch) -> None:
    calls: list[int] = []
    ranked = dispatch._candidates
    monkeypatch.setattr(
        dispatch, "_candidates", lambda p, forms, reader=None: calls.append(1) or ranked(p, forms, reader)
    )
    step = _encoder_step(16)
    step()
    shared = len(calls)
    with per_layer_dispatch():
        step()
    assert shared == 1 and len(calls) - shared == 12  # twelve layers, each dispatching


def test_rows_render() -> None:
    torch.set_num_threads(1)
    rows = measure(["encoder L=16"], rounds=1)
    assert rows[0]["per_layer_ms"] > 0 and rows[0]["shared_ms"] > 0
    assert "| encoder L=16 |" in markdown(rows)


def test_the_page_section_is_the_stored_table() -> None:
    stored = {"machine": "m", "threads": 1, "rounds": 3,
              "rows": [{"row": "encoder L=16", "per_layer_ms": 10.0, "shared_ms": 8.0, "saving": 0.2}]}
    page = f"before\n{START}\nold\n{END}\nafter\n"
    once = render_page(page, stored)
    assert "| encoder L=16 | 10.0 | 8.0 | 20% |" in once and "old" not in once and once.endswith("after\n")
    assert render_page(once, stored) == once
