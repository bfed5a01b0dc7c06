"""benchmarks.plan_per_forward: both sides compute the same step, and the table renders."""

from __future__ import annotations

import torch

import attnmm.attention._dispatch as dispatch
from benchmarks.plan_per_forward import _encoder_step, markdown, measure, per_layer_dispatch


def test_per_layer_dispatch_switches_the_sharing_off(monkeypatch) -> None:
    calls: list[int] = []
    ranked = dispatch.candidates
    monkeypatch.setattr(dispatch, "candidates", lambda p: calls.append(1) or ranked(p))
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
