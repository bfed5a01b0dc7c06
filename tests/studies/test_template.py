"""The runner's page templates: placeholders, loops, conditions and includes, rendered from a store's detail."""

from __future__ import annotations

from pathlib import Path

import pytest

from studies._runner.template import pages

PAGE = """A comment, not a block.

<!-- block row -->
| {{r.name}} | {{r.seconds:seconds}} | {{r.share:.1%}} | {{r.bytes:nbytes}} |
<!-- block results -->
Run: {{run:run}}; {{len(rows)}} rows, {{sum(r.seconds for r in rows):.2f}} s in all.

| name | time | share | memory |
|---|---|---|---|
{% for r in rows if r.seconds < 100 %}
{% include row %}
{% end %}
{% if 'missing' in detail %}
never shown
{% else %}
{{missing_value}} and {{extra * 2}}
{% end %}
<!-- block docs/page.md#table -->
{% for name, m in models.items() %}
- {{name}}: {{m.acc:pct}}
{% end %}
"""


def test_blocks_render_from_the_detail(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(PAGE)
    detail = {"run": {"command": "python -m x", "machine": "m", "minutes": 1.5}, "missing_value": None,
              "rows": [{"name": "a", "seconds": 0.25, "share": 0.5, "bytes": 3 * 2**20},
                       {"name": "b", "seconds": 12.0, "share": 0.125, "bytes": 2048},
                       {"name": "c", "seconds": 500.0, "share": 0.0, "bytes": 0}],
              "models": {"lstm": {"acc": 0.5}, "attention": {"acc": None}}}
    out = pages(tmp_path / "page.md", detail, {"extra": 21})
    assert set(out) == {"results", "docs/page.md#table"}  # a block only included is not a page
    assert out["results"] == [
        "Run: `python -m x` (m, 1.5 min); 3 rows, 512.25 s in all.", "",
        "| name | time | share | memory |", "|---|---|---|---|",
        "| a | 250 ms | 50.0% | 3.00 MB |", "| b | 12.0 s | 12.5% | 2.0 KB |",
        "— and 42"]
    assert out["docs/page.md#table"] == ["- lstm: 50.0%", "- attention: —"]


def test_an_unknown_name_or_tag_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("<!-- block results -->\n{{nope}}\n")
    with pytest.raises(NameError, match="nope"):
        pages(tmp_path / "page.md", {})
    (tmp_path / "page.md").write_text("<!-- block results -->\n{% while x %}\n{% end %}\n")
    with pytest.raises(ValueError, match="unknown template tag 'while'"):
        pages(tmp_path / "page.md", {})


def test_shared_blocks_and_joined_lines(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "common.md").write_text(
        "Shared blocks.\n<!-- block line -->\n{% join %}\nseen {{n}} time\n{% if n != 1 %}\ns\n{% end %}\n"
        "{% for t in times %}\n, at {{t}}\n{% end %}\n.\n{% end %}\n<!-- block results -->\nnot a page here\n")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "page.md").write_text(
        "<!-- blocks ../shared/common.md -->\n<!-- block results -->\n{% include line %}\nend\n")
    out = pages(tmp_path / "study" / "page.md", {"n": 2, "times": ["9:00", "10:00"]})
    assert out == {"results": ["seen 2 times, at 9:00, at 10:00.", "end"]}  # the page's own blocks only
    assert pages(tmp_path / "study" / "page.md", {"n": 1, "times": []})["results"][0] == "seen 1 time."
