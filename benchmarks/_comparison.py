"""The measured parts of docs/comparison.md, rendered from the stored benchmark run.

The page is prose written by hand with sections between markers
(``<!-- benchmarks:NAME ... -->`` ... ``<!-- /benchmarks:NAME -->``) that :func:`render_page` rewrites
from ``benchmarks/results/benchmarks.json`` (:mod:`benchmarks._page`): every time, peak and ratio the
page quotes is the stored run's, the one docs/benchmarks.md shows, and the density threshold is read
from the dispatcher. ``python -m benchmarks`` rewrites them after a run, ``--render-only`` from the store.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from attnmm.attention.backends._calibration import COSTS
from attnmm.attention.planner import DENSE_THRESHOLD
from benchmarks._page import ROOT, Store, mb, ms, row

COMPARISON = ROOT / "docs" / "comparison.md"

Row = dict[str, Any]


def start(name: str) -> str:
    return f"<!-- benchmarks:{name} (rendered from benchmarks/results/benchmarks.json by benchmarks/_comparison.py) -->"


def end(name: str) -> str:
    return f"<!-- /benchmarks:{name} -->"


def _get(store: Store, *keys: str) -> list[Row] | None:
    """The rows of ``keys``, or None when the stored run lacks one of them."""
    rows = [row(store, k) for k in keys]
    return None if any(r is None for r in rows) else rows  # type: ignore[return-value]


def _missing(*keys: str) -> list[str]:
    return [f"Not in the last run: `python -m benchmarks --cases {','.join(keys)}` measures it."]


def _times(r: Row) -> tuple[str, str]:
    return f"{ms(r['t_peer'])}, {mb(r['m_peer'])}", f"{ms(r['t_ours'])}, {mb(r['m_ours'])}"


def _missed(r: Row) -> str:
    return "" if r["met"] else f" (target {r['target']}: missed)"


def _result(r: Row) -> str:
    """The row's verdict, with its target when missed."""
    return r["result"] + _missed(r)


def _prose(text: str) -> list[str]:
    """A paragraph wrapped as the hand-written ones are."""
    return textwrap.wrap(text, 100, break_long_words=False, break_on_hyphens=False)


def _reported(r: Row) -> bool:
    """Whether the row reports a setting rather than testing a claim (its target is ``none: ...``)."""
    return str(r["target"]).startswith("none")


def _targeted(r: Row) -> str:
    """The row's verdict and its target."""
    if _reported(r):
        return f"{r['result']} (no target: the setting is reported, not claimed)"
    return f"{r['result']} (target {r['target']}{'' if r['met'] else ': missed'})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _source(store: Store) -> list[str]:
    return _prose(
        f"Every figure in the tables below is rendered from the last run of `python -m benchmarks` "
        f"({store['machine']}; fp32), the run [benchmarks.md](benchmarks.md) shows: see that page for the "
        "method, the correctness checks made before timing, and the caveats of a shared machine. Ratios, "
        "not absolute times, are the result."
    )


def _flex(store: Store) -> list[str]:
    rows = _get(store, "window_fwd", "window")
    if rows is None:
        return _missing("window_fwd", "window")
    fwd, both = rows
    memory = _ratio(fwd["m_ours"], fwd["m_peer"])
    if memory is None:
        who = "not measured"
    elif memory >= 1:
        who = f"FlexAttention uses {memory:.0f}x less"
    else:
        who = f"attnmm uses {1 / memory:.1f}x less"
    lines = [
        "| case (benchmarks.md) | FlexAttention | attnmm | result |",
        "|---|---:|---:|---|",
        f"| Window ±64, L = 8192, H = 4, E = 64, forward | {ms(fwd['t_peer'])} (compiled on CPU, compile time "
        f"excluded) | {ms(fwd['t_ours'])} (band kernel, no compile) | attnmm {_result(fwd)} |",
        f"| peak extra memory of that call | {mb(fwd['m_peer'])} | {mb(fwd['m_ours'])} | {who} |",
        f"| the same window, forward + backward | not available on CPU | {ms(both['t_ours'])} | |",
    ]
    speed = _ratio(fwd["t_peer"], fwd["t_ours"])
    if speed is not None and memory is not None:
        pace = "is faster" if speed >= 1.1 else "is about as fast" if speed >= 0.9 else "is slower"
        held = f"holds {memory:.0f}x less memory" if memory >= 1.5 else "holds no less memory"
        lines += [
            "",
            *_prose(
                f"So on CPU attnmm {pace}, needs no compilation and trains, while FlexAttention's fused kernel "
                f"{held} in the forward pass."
            ),
        ]
    return lines


_LARGE = "N = 100k nodes, M = 1M random edges"
_LAYERS = {
    "graph_conv": ("whole layer: `TransformerConv` vs `AttentionConv`", _LARGE),
    "gat_conv": ("whole layer: PyG's `GATConv` vs `attnmm.nn.GATConv`", _LARGE),
    "gat_conv_cora": (
        "the same on a small graph: PyG's `GATConv` vs `attnmm.nn.GATConv`",
        "N = 2,708 nodes, M = 10,556 random edges (Cora's size)",
    ),
    "gatv2_conv": ("whole layer: PyG's `GATv2Conv` vs `attnmm.nn.GATv2Conv`", _LARGE),
}


def _pyg(store: Store) -> list[str]:
    graph = row(store, "graph")
    if graph is None:
        return _missing("graph")
    peer, ours = _times(graph)
    lines = [
        "| case (benchmarks.md) | PyG | attnmm | result |",
        "|---|---:|---:|---|",
        f"| attention over N = 100k nodes, M = 1M random edges, H = 4, E = 64, forward + backward | {peer} "
        f"(TransformerConv's formulation) | {ours} (sparse backend) | {_targeted(graph)} |",
    ]
    layers = [r for r in (row(store, k) for k in _LAYERS) if r is not None]
    for r in layers:
        peer, ours = _times(r)
        lines.append(
            f"| {_LAYERS[r['key']][0]}, same weights, {_LAYERS[r['key']][1]}, 64 -> 4 heads x 64, "
            f"forward + backward | {peer} | {ours} "
            f"| {_targeted(r)} |"
        )
    targeted = [r for r in (graph, *layers) if not _reported(r)]
    missed = sum(not r["met"] for r in targeted)
    notes = [f"{missed} of the {len(targeted)} rows miss their target." if missed else "Every row meets its target."]
    conv = row(store, "graph_conv")
    if conv is not None and (_ratio(conv["t_peer"], conv["t_ours"]) or 0) < (
        _ratio(graph["t_peer"], graph["t_ours"]) or 0
    ):
        notes.append(
            "The `AttentionConv` layer's margin is smaller than the attention's because both layers also hold "
            "the projections of q, k, v and their gradients, which no implementation can avoid; the sparse "
            "backend works on PyG's (N, H, E) projections as they lie in memory, with no copies."
        )
    return [*lines, "", *_prose(" ".join(notes))]


def _grid(store: Store) -> list[str]:
    grid = row(store, "grid")
    if grid is None:
        return _missing("grid")
    peer, ours = _times(grid)
    memory = _ratio(grid["m_peer"], grid["m_ours"])
    less = f", {memory:.1f}x less memory" if memory is not None else ""
    return [
        "| case (benchmarks.md) | SDPA with the dense bool mask | attnmm | result |",
        "|---|---:|---:|---|",
        f"| Grid 64 x 64 patches, kernel 7, H = 4, E = 32, forward + backward | {peer} | {ours} "
        f"| {grid['result']}{less}{_missed(grid)} |",
    ]


def _dense(store: Store) -> list[str]:
    rows = _get(store, "window", "window_long", "full")
    if rows is None:
        return _missing("window", "window_long", "full")
    window, long, full = rows
    peer, ours = _times(window)
    time, memory = _ratio(long["t_ours"], long["t_peer"]), _ratio(long["m_ours"], long["m_peer"])
    growth = f"{time:.1f}x the time" if time is not None else "time not measured"
    growth += f", {memory:.1f}x the memory" if memory is not None else ""
    lines = [
        "| case (benchmarks.md) | SDPA with the dense bool mask | attnmm | result |",
        "|---|---:|---:|---|",
        f"| Window ±64, L = 8192, forward + backward | {peer} | {ours} | {_result(window)} |",
        f"| Window ±64, L = 65536 | dense needs 68 GB | {ms(long['t_ours'])}, {mb(long['m_ours'])} "
        f"| 8x the length of L = 8192 costs {growth}{_missed(long)} |",
        f"| Full, L = 1024 | {ms(full['t_peer'])} (raw SDPA) | {ms(full['t_ours'])} | dispatch {_result(full)} |",
        "",
    ]
    density = store.get("density") or {}
    crossover = density.get("crossover")
    if crossover is not None:
        measured = f"at a density of {crossover:.2f} in that run"
    elif density:
        measured = "above the largest density of that run's sweep"
    else:
        measured = "not swept in that run"
    calibrated = ", ".join(sorted(COSTS)) or "no device"
    lines += _prose(
        "The density sweep in [benchmarks.md](benchmarks.md#density-threshold) measures where masked dense "
        f"SDPA overtakes the sparse kernel: {measured}. Where the costs are calibrated ({calibrated} here), "
        "`attend` picks between the two from their estimated costs; on a device without calibrated costs it "
        f"switches to masked dense SDPA from a density of `DENSE_THRESHOLD` = {DENSE_THRESHOLD:.2f}."
    )
    return lines


SECTIONS: dict[str, Callable[[Store], list[str]]] = {
    "source": _source,
    "flex": _flex,
    "pyg": _pyg,
    "grid": _grid,
    "dense": _dense,
}


def render_section(name: str, store: Store) -> str:
    return "\n".join([start(name), *SECTIONS[name](store), end(name)])


def render_page(page: str, store: Store) -> str:
    """``page`` with every section between its markers rewritten from ``store``."""
    for name in SECTIONS:
        if page.count(start(name)) != 1 or page.count(end(name)) != 1:
            raise ValueError(
                f"docs/comparison.md must hold the markers {start(name)!r} and {end(name)!r} once each; "
                "put them back around the section they delimit"
            )
        head, rest = page.split(start(name), 1)
        page = head + render_section(name, store) + rest.split(end(name), 1)[1]
    return page
