"""docs/graphs.md runs: every python block executes in order and prints its text block."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from test_docs import blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "graphs.md"


def test_graphs_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = blocks(PAGE.read_text())
    assert len(found) == 3
    namespace: dict[str, object] = {"__name__": "docs.graphs"}
    for _, code, expected, line in found:
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            exec(compile(code, f"{PAGE}:{line}", "exec"), namespace)
        if expected is not None:
            assert stdout.getvalue().rstrip() == expected.rstrip(), f"graphs.md:{line} printed:\n{stdout.getvalue()}"
