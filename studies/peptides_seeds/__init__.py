"""Peptides-func: two GPS widths chosen on validation, the chosen config's seeds and its message-passing row
(each run is ``recipes/graph_graph.py`` with the candidate's config and arguments)."""

from __future__ import annotations

import statistics
from typing import Any

from studies._runner import Items
from studies._runner.render import table


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "val"}``: that part of the official split, as graph indices (the data module's)."""
    from attnmm.data import GraphDataModule

    dm = GraphDataModule(name="peptides-func", pe="none")
    dm.setup("fit")
    return Items.of(spec, graph=[f"peptides:{i}" for i in dm.split_indices[spec["part"]].tolist()])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """``fit`` of the recipe (a selection run with ``--test_after_fit false``: validation metrics only)."""
    from pathlib import Path

    from studies._graphs.splits import ROOT, fit_split

    select = evaluate.kind == "select"
    cmd = ["recipes/graph_graph.py", "fit", "--config", candidate.get("config", budget["config"]),
           "--seed_everything", str(seed), "--torch_threads", str(budget["threads"]), *candidate["args"]]
    cmd += ["--test_after_fit", "false"] if select else []
    out = fit_split(cmd, Path(budget.get("workdir", ROOT / "runs" / "studies")) / f"peptides_{seed}")
    stage = "val" if select else "test"
    return {name: {"ap": out["metrics"][f"{stage}_ap"]} for name in evaluate}, out


def _mean(xs: list[float]) -> str:
    return f"{statistics.fmean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def render(view: Any) -> list[str]:
    sel = view.records("select")
    out = ["### Selection runs (validation only, seed 0)", "",
           *table(["candidate", "best `val_ap`", "at epoch"],
                  [(r["candidate"], f"{r['scores']['val']['ap']:.4f}", r["detail"]["best_epoch"]) for r in sel]),
           "", "The selection runs' metrics were not stored when they ran; their numbers were recovered from the "
           "results page they were reported on.", ""]
    for cand, what in (("B", "the chosen config (B)"), ("B_mpnn", "the message-passing row (B, `attention: false`)")):
        recs = [r for r in view.records("test") if r["candidate"] == cand]
        rows = [(r["seed"], f"{r['detail']['best_val_ap']:.4f} ({r['detail']['best_epoch']})",
                 f"{r['scores']['test']['ap']:.4f}", f"{100 * r['scores']['test']['acc']:.2f}%") for r in recs]
        rows.append(("mean ± std", "", f"**{_mean([r['scores']['test']['ap'] for r in recs])}**", ""))
        header = ["seed", "best `val_ap` (epoch)", "test AP", "test accuracy"]
        out += [f"### Test: {what}", "", *table(header, rows), ""]
    return out


def summary(view: Any) -> list[dict[str, Any]]:
    rows = []
    for cand, what in (("B", "test AP, the default config (GPS)"), ("B_mpnn", "test AP, its message passing alone")):
        aps = [r["scores"]["test"]["ap"] for r in view.records("test") if r["candidate"] == cand]
        rows.append({"task": view.protocol.data["task"], "dataset": view.protocol.data["dataset"],
                     "split": view.protocol.data["split_protocol"], "metric": what,
                     "result": f"{_mean(aps)} ({len(aps)} seeds)", "anchors": view.protocol.data["anchors"],
                     "order": view.protocol.data["order"]})
    return rows
