"""Every recipe's checkpoints load with ``weights_only=True`` (no unpickling of code), both as a raw
``torch.load`` and as a ``ClassificationTask`` rebuilt from the configs in its hyperparameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _recipes import data_root, run_recipe

from attnmm.lightning import ClassificationTask

# recipe -> (data folder under $ATTNMM_DATA or None, extra arguments for a two-step run)
RECIPES = {
    "graph_graph": (None, ["--data.num_graphs=40", "--data.batch_size=8"]),
    "graph_node": ("planetoid", []),
    "speech_truncated": ("fsdd", []),
    "image_patches": ("MNIST", []),
    "text_pos": ("ud_english_ewt", []),
    "text_lm": ("tinyshakespeare", ["--data.block_size=64", "--data.eval_stride=64", "--trainer.val_check_interval=2"]),
}
SHORT = [
    "--trainer.max_epochs=1", "--trainer.max_steps=2", "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1", "--torch_threads=1",
    "--trainer.enable_model_summary=false",
]


@pytest.mark.parametrize(
    "recipe", [pytest.param(r, marks=[pytest.mark.data] if RECIPES[r][0] else []) for r in sorted(RECIPES)]
)
def test_checkpoints_load_weights_only(recipe: str, tmp_path: Path) -> None:
    folder, extra = RECIPES[recipe]
    if folder is not None:
        data_root(folder)
    run_recipe(recipe, ["fit", *SHORT, *extra], tmp_path)
    paths = sorted(tmp_path.glob("runs/**/*.ckpt"))
    assert {p.name.split("-")[0].removesuffix(".ckpt") for p in paths} == {"best", "last"}
    for path in paths:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        task = ClassificationTask.load_from_checkpoint(path, map_location="cpu", weights_only=True)
        loaded = task.state_dict()
        assert loaded.keys() == ckpt["state_dict"].keys()
        for name, value in ckpt["state_dict"].items():
            torch.testing.assert_close(loaded[name], value, rtol=0, atol=0)
