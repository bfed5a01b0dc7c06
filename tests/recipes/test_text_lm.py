"""recipes/text_lm.py on the real Tiny Shakespeare text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import data_root, run_recipe

pytestmark = pytest.mark.data


def test_fast_dev_run_prints_a_sample(tmp_path: Path) -> None:
    data_root("tinyshakespeare")
    args = ["fit", "--trainer.fast_dev_run=true", "--data.block_size=64", "--data.eval_stride=32"]
    proc = run_recipe("text_lm", args, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "text_lm" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert metrics["test_loss"] > 0.0
    assert "--- sample (20 tokens" in proc.stdout and "ROMEO:" in proc.stdout
