"""The graph guide's GPSConv table is the stored run of benchmarks/gps_conv.py, rendered (a GPU run in a
table of its own); batches saved for a machine without the data are read back, a missing file refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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


def test_saved_batches_are_read_back_as_the_layers_take_them(tmp_path: Path) -> None:
    saved = tmp_path / "batches.pt"
    batch = torch.tensor([0, 0, 0, 1, 1])
    torch.save([{"edge_index": torch.tensor([[0, 1, 3], [1, 2, 4]]), "batch": batch}] * 3, saved)
    batches = gps_conv._batches(2, str(saved))
    assert len(batches) == 2 and batches[0].num_nodes == 5 and torch.equal(batches[1].batch, batch)
    with pytest.raises(SystemExit, match="holds 3 batches; --calls 3 needs 4"):
        gps_conv._batches(4, str(saved))


def test_a_missing_batches_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        gps_conv.main(["--batches", str(tmp_path / "none.pt"), "--no-write"])
    assert "no such file (write one with --save-batches" in capsys.readouterr().err
