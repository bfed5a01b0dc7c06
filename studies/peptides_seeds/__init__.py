"""Peptides-func: two GPS widths chosen on validation, the chosen config's seeds and its message-passing row
(each run is ``recipes/graph_graph.py`` with the candidate's config and arguments; the pages are the protocol's
``tables`` and ``summary``)."""

from __future__ import annotations

from typing import Any

from studies._runner import Items


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "val"}``: that part of the official split, as graph indices (the data module's)."""
    from attnmm.data import GraphDataModule

    dm = GraphDataModule(name="peptides-func", pe="none")
    dm.setup("fit")
    return Items.of(spec, graph=[f"peptides:{i}" for i in dm.split_indices[spec["part"]].tolist()])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """``fit`` of the recipe (a selection run with ``--test_after_fit false``: validation metrics only)."""
    from pathlib import Path

    from studies._runner.train import ROOT, fit_recipe

    select = evaluate.kind == "select"
    cmd = ["recipes/graph_graph.py", "fit", "--config", candidate.get("config", budget["config"]),
           "--seed_everything", str(seed), "--torch_threads", str(budget["threads"]), *candidate["args"]]
    cmd += ["--test_after_fit", "false"] if select else []
    out = fit_recipe(cmd, Path(budget.get("workdir", ROOT / "runs" / "studies")) / f"peptides_{seed}")
    stage = "val" if select else "test"
    return {name: {"ap": out["metrics"][f"{stage}_ap"]} for name in evaluate}, out
