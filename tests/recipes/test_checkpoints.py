"""Every recipe's checkpoints load with ``weights_only=True`` (no unpickling of code), both as a raw
``torch.load`` and as a ``ClassificationTask`` rebuilt from the configs in its hyperparameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _recipes import generated_args, run_recipe, smoke_params

from attnmm.lightning import ClassificationTask

# recipe -> (data folder under $ATTNMM_DATA or None, extra arguments for a two-step run)
SHORT = [
    "--trainer.max_epochs=1", "--trainer.max_steps=2", "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1", "--torch_threads=1",
    "--trainer.enable_model_summary=false",
]


@pytest.mark.parametrize("recipe", smoke_params())
def test_checkpoints_load_weights_only(recipe: str, tmp_path: Path) -> None:
    extra = generated_args(recipe) + (["--trainer.val_check_interval=2"] if recipe == "text_lm" else [])
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
