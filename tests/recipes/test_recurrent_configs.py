"""The recurrent-encoder configs beside the attention defaults: each recipe runs with an LSTM in the
encoder's place, injected by ``class_path`` (text_lm_lstm, text_pos_lstm, speech_truncated_lstm), on
the real data or generated files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import config_path, generated_args, run_recipe

CONFIGS = {
    "text_lm": "text_lm_lstm.yaml",
    "text_pos": "text_pos_lstm.yaml",
    "speech_truncated": "speech_truncated_lstm.yaml",
}


@pytest.mark.parametrize("recipe", sorted(CONFIGS))
def test_fast_dev_run_with_an_lstm_encoder(recipe: str, tmp_path: Path) -> None:
    extra = generated_args(recipe)  # generated files (the real data: test_smoke.py)
    config = config_path(CONFIGS[recipe])
    run_recipe(recipe, ["fit", "--trainer.fast_dev_run=true", f"--config={config}", *extra], tmp_path)
    run_dir = tmp_path / "runs" / config.stem / "version_0"  # the smoke run's own folder
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics) >= {"test_acc", "test_loss"}
    import torch

    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert any(key.startswith("encoder.rnn.") for key in ckpt["state_dict"])  # the LSTM was trained
