"""benchmarks._measure's memory as a fresh process feels it, and the memory-only re-measurement."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import benchmarks.__main__ as cli
from benchmarks._cases import get_case
from benchmarks._measure import process_peak

MB = 2**20


def test_the_first_call_counts_and_what_stays_is_reported() -> None:
    kept: list[torch.Tensor] = []

    def first_call_builds_a_cache() -> None:
        scratch = torch.ones(40 * MB // 4)  # freed after the call
        if not kept:
            kept.append(torch.ones(20 * MB // 4))  # what a first call keeps (a cache)
        del scratch

    peak, held = process_peak(first_call_builds_a_cache, calls=3)
    assert peak >= 55 * MB  # the first call's scratch and its cache together
    assert 18 * MB <= held < 40 * MB  # the cache stays, the scratch does not


def test_memory_only_keeps_the_times_and_recomputes_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    case = get_case("window")
    row: dict[str, Any] = {"key": "window", "title": case.title, "peer": case.peer_name, "target": case.target,
                           "t_peer": 2.0, "t_ours": 0.1, "m_peer": 1, "m_ours": 1, "result": "old", "met": False}
    store = {"rows": [row], "machine": "m"}
    calls: list[tuple[str, str]] = []

    def fake(key: str, side: str) -> dict[str, int]:
        calls.append((key, side))
        return {"peak": (400 if side == "peer" else 50) * MB, "held": 3 * MB}

    monkeypatch.setattr(cli, "peak_in_subprocess", fake)
    cli.remeasure_memory(store, [case], write_pages=False)
    assert calls == [("window", "ours"), ("window", "peer")]
    assert row["t_peer"] == 2.0 and row["t_ours"] == 0.1  # times as stored
    assert row["m_peer"] == 400 * MB and row["held_ours"] == 3 * MB
    assert row["result"] == case.verdict(2.0, 0.1, 400.0 * MB, 50.0 * MB)[0]
    assert "memory of every row re-measured" in store["machine"]
