"""Every recipe's smoke run under ``--trainer.precision=bf16-mixed``: the autocast path a GPU run
takes (here on CPU, where autocast supports bf16 too); benchmarks/gpu_recipes_check.sh runs the
same on CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import generated_args, run_recipe, smoke_params


@pytest.mark.parametrize("recipe", smoke_params())
def test_bf16_mixed_smoke_run(recipe: str, tmp_path: Path) -> None:
    extra = generated_args(recipe)
    args = ["fit", "--trainer.fast_dev_run=true", "--trainer.precision=bf16-mixed", "--torch_threads=1", *extra]
    run_recipe(recipe, args, tmp_path)
    (path,) = tmp_path.glob("runs/**/metrics.json")
    metrics = json.loads(path.read_text())
    assert {"test_acc", "test_loss"} <= set(metrics) and all(v == v for v in metrics.values())  # no NaN
