"""docs/benchmarks.md is the header plus what the stored run renders, and a run stores what it renders."""

from __future__ import annotations

import re

import pytest

import benchmarks.__main__ as cli
from attnmm.attention.planner import DENSE_THRESHOLD
from benchmarks import _page
from benchmarks._cases import Case


def test_page_is_exactly_the_rendered_store() -> None:
    # no hand-written line below the header, no figure from another run
    assert _page.PAGE.read_text() == _page.render_page(_page.load()), (
        "docs/benchmarks.md differs from what the stored run renders: edit benchmarks/header.md, not the page, "
        "then run `python -m benchmarks --render-only`"
    )


def test_store_has_a_row_per_case_and_the_density_sweep() -> None:
    store = _page.load()
    assert [r["key"] for r in store["rows"]] == [c.key for c in cli.CASES]
    for r in store["rows"]:
        assert {"title", "peer", "target", "t_peer", "t_ours", "m_peer", "m_ours", "result", "met"} <= set(r)
    assert len(store["density"]["rows"]) > 1


def test_recipe_steps_are_on_the_page_with_their_verdicts() -> None:
    from benchmarks import recipe_steps

    steps = _page.load()["recipe_steps"]
    rows = {r["row"] for r in steps["rows"]}
    expected = {label for group in recipe_steps.ROWS.values() for label, _, _ in group()}
    assert rows == expected  # every row of the module, measured before and after
    section = _page.PAGE.read_text().split("## Recipe steps", 1)[1].split("\n## ", 1)[0]
    for r in steps["rows"]:
        met = "**yes**" if r["after"]["ratio"] <= recipe_steps.SLOWER_AT_MOST else "no"
        assert f"| {r['row']} |" in section and section.split(f"| {r['row']} |", 1)[1].split("\n", 1)[0].endswith(
            f"| {met} |"
        )


def test_threshold_on_the_page_is_the_code_s() -> None:
    density = _page.PAGE.read_text().split("## Density threshold", 1)[1]
    assert re.findall(r"`DENSE_THRESHOLD`, is (\d+\.\d+)", density) == [f"{DENSE_THRESHOLD:.2f}"]


def test_rows_render_missing_values_and_failures() -> None:
    failed = {"title": "T", "peer": "P", "target": ">= 2x", "t_peer": None, "t_ours": None}
    failed |= {"m_peer": None, "m_ours": None, "result": "correctness check failed: off by 1", "met": False}
    assert _page.render_row(failed) == "| T | P | — | — | — | — | — | correctness check failed: off by 1 | >= 2x | no |"
    ok = failed | {"t_peer": 12.5, "t_ours": 0.0421, "m_peer": 3 * 2**20, "m_ours": 2**20, "result": "2x", "met": True}
    assert _page.render_row(ok) == "| T | P | 12.5 s | 42.1 ms | — | 3 MB | 1 MB | 2x | >= 2x | **yes** |"
    ok |= {"spread": [1.8, 2.04, 2.31], "held_peer": 0, "held_ours": 2**20}
    expected = "| T | P | 12.5 s | 42.1 ms | 1.8 / 2.0 / 2.3 | 3 MB (held 0) | 1 MB (held 1) | 2x | >= 2x | **yes** |"
    assert _page.render_row(ok) == expected


def _case(check: object = lambda x: "exact") -> Case:
    return Case(
        "toy",
        "toy title",
        "toy peer",
        ">= 1x faster",
        build=lambda: {},
        ours=lambda x: lambda: None,
        peer=lambda x: lambda: None,
        check=check,  # type: ignore[arg-type]
        verdict=lambda tp, to, mp, mo: (f"{tp / to:.1f}x faster", tp >= to),
        rounds=1,
    )


def test_run_case_returns_the_row_it_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "wait_for_idle", lambda: True)
    rounds: list[int] = []
    monkeypatch.setattr(
        cli, "alternate_rounds", lambda peer, ours, n: rounds.append(n) or [(0.3, 0.1), (0.33, 0.1), (0.6, 0.12)]
    )
    row = cli.run_case(_case(), memory=False)
    assert rounds == [3]  # at least three rounds, for the spread
    assert row["key"] == "toy" and (row["t_peer"], row["t_ours"], row["m_peer"]) == (0.3, 0.1, None)
    assert (
        _page.render_row(row)
        == "| toy title | toy peer | 300.0 ms | 100.0 ms | 3.0 / 3.3 / 5.0 | — | — | 3.0x faster | >= 1x faster "
        "| **yes** |"
    )

    def wrong(x: object) -> str:
        raise AssertionError("max error 0.5")

    row = cli.run_case(_case(wrong), memory=False)
    assert (row["met"], row["result"]) == (False, "correctness check failed: max error 0.5")


def test_write_stores_and_renders_both_pages(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = _page.load()
    comparison = tmp_path / "comparison.md"
    comparison.write_text(cli.COMPARISON.read_text())
    for name, path in {"STORE": tmp_path / "b.json", "PAGE": tmp_path / "b.md", "COMPARISON": comparison}.items():
        monkeypatch.setattr(cli, name, path)
    monkeypatch.setattr(cli, "ROOT", tmp_path)
    cli.write(store)
    assert _page.load(tmp_path / "b.json") == store
    assert (tmp_path / "b.md").read_text() == _page.PAGE.read_text()
    assert comparison.read_text() == cli.COMPARISON.read_text()
