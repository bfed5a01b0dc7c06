"""The recipes' own runs: each recipe's default config (and the variants its page presents) as a user runs it;
a run is the recipe's ``fit`` in a fresh process; the pages are the protocol's ``tables`` and ``summary``."""

from __future__ import annotations

from typing import Any

from studies._runner import Items
from studies._runner.train import fit_scores, workdir

_SCRIPTS = {"timeseries": "examples/timeseries/train.py"}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"recipe": "text_lm", "part": "test"}``: the recipe data module's own split of that part."""
    return Items.of(spec, item=[f"{spec['recipe']}:{spec['part']}"])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    recipe = train.payload["recipe"]
    cmd = [_SCRIPTS.get(recipe, f"recipes/{recipe}.py"), "fit", f"--seed_everything={seed}"]
    cmd += ["--config", candidate["config"]] if candidate["config"] else []
    return fit_scores(cmd, workdir(budget) / f"{recipe}_{seed}", evaluate, budget.get("metric", "acc"))
