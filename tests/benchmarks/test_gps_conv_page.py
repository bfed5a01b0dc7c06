"""The graph guide's GPSConv table is the stored run of benchmarks/gps_conv.py, rendered."""

from __future__ import annotations

import json

from benchmarks import gps_conv


def _run(pyg: float, ours: float) -> dict:
    return {"nodes": 9800, "first_s": pyg, "steady_s": pyg / 2, "first_peak": 80 * 2**20 * pyg,
            "steady_peak": 70 * 2**20 * pyg} if ours < 0 else {
        "nodes": 9800, "first_s": ours, "steady_s": ours / 2, "first_peak": 40 * 2**20 * ours,
        "steady_peak": 35 * 2**20 * ours}


def test_the_table_gives_medians_and_the_rounds_spread() -> None:
    stored = {"machine": "m", "commit": "abc1234", "threads": 1, "rounds": 3, "calls": 4,
              "pyg": [_run(p, -1) for p in (3.0, 2.0, 4.0)], "ours": [_run(0, o) for o in (1.0, 1.0, 1.0)]}
    table = gps_conv.markdown(stored)
    assert "| time, first call | 3.000 s | 1.000 s | 3.00x (rounds 2.00-4.00) |" in table
    assert "| peak memory, first call | 240.0 MiB | 40.0 MiB | 6.00x (rounds 4.00-8.00) |" in table
    assert "medians of 3 alternating rounds" in table and "`abc1234`" in table


def test_the_page_section_is_the_stored_run() -> None:
    stored = json.loads(gps_conv.RESULTS.read_text())
    page = gps_conv.PAGE.read_text()
    assert gps_conv.START in page and gps_conv.render_page(page, stored) == page


def test_a_gpu_run_gets_a_table_of_its_own_after_the_cpu_one() -> None:
    stored = {**json.loads(gps_conv.RESULTS.read_text()), "device": "cuda", "gpu": "a GPU"}
    page = gps_conv.PAGE.read_text()
    assert gps_conv.CUDA_START not in page  # (no run on a GPU stored yet)
    first = gps_conv.render_cuda_page(page, stored)
    assert first.index(gps_conv.END) < first.index(gps_conv.CUDA_START) < first.index(gps_conv.CUDA_END)
    assert "on the GPU (a GPU), peak memory as the CUDA allocator counts it" in first
    assert gps_conv.render_page(first, json.loads(gps_conv.RESULTS.read_text())) == first  # the CPU table kept
    assert gps_conv.render_cuda_page(first, stored) == first  # rendered again: the same page
