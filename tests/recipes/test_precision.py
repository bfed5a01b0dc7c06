"""Every recipe's smoke run under ``--trainer.precision=bf16-mixed``: the autocast path a GPU run
takes (here on CPU, where autocast supports bf16 too); benchmarks/gpu_recipes_check.sh runs the
same on CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import data_root, run_recipe

# recipe -> (data folder under $ATTNMM_DATA or None, extra arguments)
RECIPES = {
    "graph_graph": (None, ["--data.num_graphs=40", "--data.batch_size=8"]),
    "graph_node": ("planetoid", []),
    "speech_truncated": ("fsdd", []),
    "image_patches": ("MNIST", []),
    "text_pos": ("ud_english_ewt", []),
    "text_lm": ("tinyshakespeare", ["--data.block_size=64", "--data.eval_stride=64"]),
}


@pytest.mark.parametrize(
    "recipe", [pytest.param(r, marks=[pytest.mark.data] if RECIPES[r][0] else []) for r in sorted(RECIPES)]
)
def test_bf16_mixed_smoke_run(recipe: str, tmp_path: Path) -> None:
    folder, extra = RECIPES[recipe]
    if folder is not None:
        data_root(folder)
    args = ["fit", "--trainer.fast_dev_run=true", "--trainer.precision=bf16-mixed", "--torch_threads=1", *extra]
    run_recipe(recipe, args, tmp_path)
    (path,) = tmp_path.glob("runs/**/metrics.json")
    metrics = json.loads(path.read_text())
    assert {"test_acc", "test_loss"} <= set(metrics) and all(v == v for v in metrics.values())  # no NaN
