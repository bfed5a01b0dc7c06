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


def test_every_gat_speed_claim_names_its_graph_and_the_small_graph_is_measured() -> None:
    """Once: the comparison page claimed "4.9x faster, 10.1x less memory" without saying next to it that this
    holds at 100k nodes and 1M edges; a small graph (Cora's size) was not measured."""
    comparison = PAGE.parent / "comparison.md"
    for page in (PAGE, comparison):
        rows = [r for r in page.read_text().splitlines() if r.startswith("|") and "GAT" in r and "faster" in r]
        assert rows, page.name
        for row in rows:
            assert "N = " in row or "Cora-sized" in row, f"{page.name}: a speed claim without its graph: {row}"
        assert any("2,708" in r and "10,556" in r for r in rows), f"{page.name} has no Cora-sized row"
