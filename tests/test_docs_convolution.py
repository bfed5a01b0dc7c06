"""docs/convolution.md runs: its python blocks execute in order and print the text blocks after them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from test_docs import DOCS, blocks


def test_convolution_page_runs(tmp_path: Path, monkeypatch) -> None:
    path = DOCS / "convolution.md"
    found = blocks(path.read_text())
    assert found
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs.convolution"}
    for _, code, expected, line in found:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{path}:{line}", "exec"), namespace)
        if expected is not None:
            printed = out.getvalue()
            assert printed.rstrip() == expected.rstrip(), f"docs/convolution.md:{line} printed:\n{printed}"
    for target in ("recipes/image.md",):
        assert f"]({target}" in path.read_text()
