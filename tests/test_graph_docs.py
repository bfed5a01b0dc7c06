"""docs/graphs.md runs: every python block executes in order and prints its text block."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs import RUN_PAGE, blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "graphs.md"


def test_graphs_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = blocks(PAGE.read_text())
    assert len(found) == 5  # AttentionConv, GATConv and GATv2Conv, more than the edges, GPS, GPSConv with a mask
    RUN_PAGE.run_page(PAGE, check=True)  # every block runs and prints its text block
