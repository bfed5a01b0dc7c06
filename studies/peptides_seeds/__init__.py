"""Peptides-func: two GPS widths chosen on validation, the chosen config's seeds and its message-passing row
(each run is ``recipes/graph_graph.py`` with the candidate's config and arguments; the pages are the protocol's
``tables`` and ``summary``)."""

from __future__ import annotations

from typing import Any

from studies._runner import Items
from studies._runner.train import fit_scores, workdir
from studies.peptides_field import resolve  # noqa: F401  (the official split's graphs, as the field study names them)


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """``fit`` of the recipe (a selection run: validation metrics only)."""
    cmd = ["recipes/graph_graph.py", "fit", "--config", candidate.get("config", budget["config"]),
           "--seed_everything", str(seed), "--torch_threads", str(budget["threads"]), *candidate["args"]]
    return fit_scores(cmd, workdir(budget) / f"peptides_{seed}", evaluate, "ap")
