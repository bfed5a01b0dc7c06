"""The stored results of ``python -m benchmarks`` and the page rendered from them.

A run stores its rows in ``benchmarks/results/benchmarks.json``; docs/benchmarks.md is ``header.md``
followed by :func:`render_results` of that store, nothing else, so the page can be rewritten from the
store alone (``python -m benchmarks --render-only``) and a test can check that it was. One row::

    {"key": "window", "title": ..., "peer": ..., "target": ...,
     "t_peer": 1.42, "t_ours": 0.042,           # seconds of the fastest call, or null
     "m_peer": 287309824, "m_ours": 84934656,   # peak extra bytes of a fresh process, or null (not measured)
     "held_peer": 50331648, "held_ours": 1048576,  # bytes it still holds after its calls (absent in old runs)
     "result": "33.8x faster", "met": true,     # Case.verdict, or why there is no verdict
     "spread": [31.9, 33.1, 34.0]}              # the peer's time over ours per round: min, median, max
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnmm.attention.planner import DENSE_THRESHOLD

ROOT = Path(__file__).resolve().parent.parent
HEADER = Path(__file__).with_name("header.md")
STORE = Path(__file__).with_name("results") / "benchmarks.json"
PAGE = ROOT / "docs" / "benchmarks.md"

Store = dict[str, Any]


def splice(page: str, section: str, start: str, end: str) -> str:
    """``page`` with the text from marker ``start`` to marker ``end`` replaced by ``section`` (which holds
    both markers), or ``section`` appended when the page has no markers yet."""
    if start in page and end in page:
        head, rest = page.split(start, 1)
        return head + section.rstrip("\n") + rest.split(end, 1)[1]
    return page.rstrip("\n") + "\n\n" + section


def generated(page: str, start: str, end: str, command: str, store: Path, body: list[str]) -> str:
    """``page`` with its section between ``start`` and ``end`` replaced by ``body`` (lines of Markdown),
    headed by the note that ``command`` writes it from ``store`` (a path under the repository)."""
    note = f"<!-- Written by `{command}` from {store.relative_to(ROOT)}; edit the module, not this section. -->"
    return splice(page, "\n".join([start, note, "", *body, end]), start, end)


def publish(stored: Store, results: Path, page: Path, render: Any, indent: int = 1) -> None:
    """Write a benchmark's run to its store ``results`` and its section of ``page``, rendered by
    ``render(page_text, stored)`` from that store alone."""
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(stored, indent=indent) + "\n")
    page.write_text(render(page.read_text(), stored))


def load(path: Path = STORE) -> Store:
    """The stored results of the last run."""
    return json.loads(path.read_text())


def save(store: Store, path: Path = STORE) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(store, indent=1, ensure_ascii=False) + "\n")


def row(store: Store, key: str) -> dict[str, Any] | None:
    """The stored row of case ``key``, or None when the last run did not include it."""
    return next((r for r in store["rows"] if r["key"] == key), None)


def ms(t: float | None) -> str:
    """A time as the table prints it."""
    return "—" if t is None else f"{1e3 * t:.1f} ms" if t < 10 else f"{t:.1f} s"


def mb(m: int | None) -> str:
    """A peak as the table prints it."""
    return "—" if m is None else f"{m / 2**20:.0f} MB"


def peak(r: dict[str, Any], side: str) -> str:
    """A side's peak as the table prints it, with what the process still held after its calls."""
    held = r.get(f"held_{side}")
    return mb(r[f"m_{side}"]) + ("" if held is None else f" (held {held / 2**20:.0f})")


def ratios(r: dict[str, Any]) -> str:
    """The spread of the speed ratio over the rounds, as the table prints it."""
    s = r.get("spread")
    return "—" if not s else f"{s[0]:.1f} / {s[1]:.1f} / {s[2]:.1f}"


def render_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['title']} | {r['peer']} | {ms(r['t_peer'])} | {ms(r['t_ours'])} | {ratios(r)} | {peak(r, 'peer')} "
        f"| {peak(r, 'ours')} | {r['result']} | {r['target']} | {'**yes**' if r['met'] else 'no'} |"
    )


def render_density(density: dict[str, Any]) -> str:
    from benchmarks.density import markdown

    rows = [tuple(r) for r in density["rows"]]
    return (
        f"{markdown(rows, density['crossover'])}\n\n"  # type: ignore[arg-type]
        f"The dispatcher's fallback threshold, `DENSE_THRESHOLD`, is {DENSE_THRESHOLD:.2f} (read from\n"
        "`attnmm/attention/planner.py` when this page is written)."
    )


def render_recipe_steps(steps: dict[str, Any]) -> str:
    from benchmarks.recipe_steps import markdown

    return (
        "One training step (forward, loss, backward) of each recipe's model on inputs of its real shapes,\n"
        "under Full and under the recipe's restricted mask, alternated in one process "
        f"({steps['threads']} thread(s); median of {steps['samples']} samples of {steps['steps']} steps; "
        "`python -m benchmarks.recipe_steps`).\n"
        "*Before*: dispatch by the backends' declared preference (the calibrated constants removed: a band\n"
        "mask always runs on the band kernel); *after*: dispatch by the calibrated cost model. The target:\n"
        "a restricted mask is never more than 5% slower than Full, and faster where it is sparse enough.\n\n"
        f"{markdown(steps['rows'])}"
    )


def render_results(store: Store) -> str:
    """Everything below the header: the machine, the table and the density sweep."""
    table = "\n".join(
        [
            "| case | peer | peer time | attnmm time | speed ratio per round (min / median / max) | peer peak "
            "| attnmm peak | result | target | met |",
            "|---|---|---:|---:|---:|---:|---:|---|---|---|",
            *map(render_row, store["rows"]),
        ]
    )
    environment = f"\n\nPeers' environment: {store['environment']}." if store.get("environment") else ""
    text = f"## Results\n\n{store['machine']}{environment}\n\n{table}\n"
    if store.get("recipe_steps"):
        text += f"\n## Recipe steps: Full against the recipe's mask\n\n{render_recipe_steps(store['recipe_steps'])}\n"
    if store.get("density"):
        text += f"\n## Density threshold\n\n{render_density(store['density'])}\n"
    return text


def render_page(store: Store) -> str:
    """docs/benchmarks.md: the header, then the results."""
    return HEADER.read_text() + "\n" + render_results(store)
