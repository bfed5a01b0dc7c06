"""docs/comparison.md quotes the stored run only: its measured sections are what the store renders,
every time and peak in them is in the table of docs/benchmarks.md, and the threshold is the code's."""

from __future__ import annotations

import copy
import re

import pytest

from attnmm.attention.planner import DENSE_THRESHOLD
from benchmarks import _comparison, _page


def _sections(page: str) -> dict[str, str]:
    return {
        name: page.split(_comparison.start(name), 1)[1].split(_comparison.end(name), 1)[0]
        for name in _comparison.SECTIONS
    }


def test_page_quotes_the_stored_run() -> None:
    page = _comparison.COMPARISON.read_text()
    assert page == _comparison.render_page(page, _page.load()), (
        "docs/comparison.md's measured sections differ from the stored run: edit benchmarks/_comparison.py "
        "(or the prose outside the markers), then run `python -m benchmarks --render-only`"
    )


def test_every_time_and_peak_quoted_is_in_the_benchmark_table() -> None:
    table = _page.PAGE.read_text().split("## Results", 1)[1].split("## Density threshold", 1)[0]
    cells = {c.split(" (held")[0].strip() for line in table.splitlines() for c in line.split("|")}  # peak (held ...)
    quoted = 0
    for name, text in _sections(_comparison.COMPARISON.read_text()).items():
        for figure in re.findall(r"\b\d+(?:\.\d+)? (?:ms|s|MB)\b", text):
            assert figure in cells, f"docs/comparison.md ({name}) quotes {figure}, not in docs/benchmarks.md's table"
            quoted += 1
    assert quoted >= 20


def test_density_figures_are_the_sweep_s_and_the_code_s() -> None:
    dense = " ".join(_sections(_comparison.COMPARISON.read_text())["dense"].split())
    crossover = _page.load()["density"]["crossover"]
    assert f"at a density of {crossover:.2f} in that run" in dense
    assert re.findall(r"`DENSE_THRESHOLD` = (\d+\.\d+)", dense) == [f"{DENSE_THRESHOLD:.2f}"]
    outside = _comparison.COMPARISON.read_text()
    for text in _sections(outside).values():
        outside = outside.replace(text, "")
    assert not re.search(r"\d+(?:\.\d+)? ?(?:ms|MB|x faster|x less)|density of 0\.\d", outside), (
        "a measured figure outside the rendered sections"
    )


def test_missing_markers_are_named() -> None:
    page = _comparison.COMPARISON.read_text().replace(_comparison.end("grid"), "")
    with pytest.raises(ValueError, match=r"markers '<!-- benchmarks:grid .*'<!-- /benchmarks:grid -->' once each"):
        _comparison.render_page(page, _page.load())


def test_a_row_not_run_or_a_target_missed_is_said() -> None:
    store = copy.deepcopy(_page.load())
    store["rows"] = [r for r in store["rows"] if r["key"] != "grid"]
    for r in store["rows"]:
        if r["key"] in ("graph_conv", "window"):
            r["met"] = False
    assert "Not in the last run: `python -m benchmarks --cases grid`" in "\n".join(_comparison._grid(store))
    pyg = " ".join(_comparison._pyg(store))
    assert "(target >= 4x faster, >= 8x less peak memory: missed)" in pyg and "1 of the 4 rows miss" in pyg
    assert f"{_page.row(store, 'window')['result']} (target >= 20x faster: missed)" in "".join(
        _comparison._dense(store)
    )


def test_prose_follows_the_figures() -> None:
    store = copy.deepcopy(_page.load())
    fwd = _page.row(store, "window_fwd")
    assert fwd is not None
    fwd["t_ours"] = 2 * fwd["t_peer"]
    fwd["m_ours"] = fwd["m_peer"]
    text = " ".join(_comparison._flex(store))
    assert "attnmm is slower" in text and "holds no less memory" in text
    store["density"] = None
    assert "not swept in that run" in " ".join(_comparison._dense(store))
