"""docs/convolution.md runs: its python blocks execute in order and print the text blocks after them."""

from __future__ import annotations

from pathlib import Path

from test_docs import DOCS, RUN_PAGE


def test_convolution_page_runs(tmp_path: Path, monkeypatch) -> None:
    path = DOCS / "convolution.md"
    monkeypatch.chdir(tmp_path)
    RUN_PAGE.run_page(path, check=True)  # every block runs and prints its text block
    for target in ("recipes/image.md",):
        assert f"]({target}" in path.read_text()
