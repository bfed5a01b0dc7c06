"""Self-attention against LSTMs: the text recipes' quality at equal budget is the study's test (:mod:`.measure`
holds the measured parts, ``page.md`` writes docs/rnn.md from the store)."""

from __future__ import annotations

from typing import Any

from studies._runner import Items
from studies.recipe_runs import resolve  # noqa: F401  (the recipe's own data split, its data module's)


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """One ``fit`` of the recipe with the candidate's config (None: the recipe's default), the time cap lifted."""
    from benchmarks._recipe_runs import run_fits_side_by_side
    from studies.rnn_attention.measure import STUDY_CONFIGS, _run_summary

    recipe = train.payload["recipe"]
    config = candidate["config"].get(recipe) if candidate["config"] else None
    args = ["--trainer.max_time=null", *([f"--config={STUDY_CONFIGS / config}"] if config else [])]
    (out,) = run_fits_side_by_side([(recipe, args)], seed=seed, collect=_run_summary)
    return {name: {k.removeprefix("test_"): out[k] for k in ("test_loss", "test_acc") if k in out}
            for name in evaluate}, out
