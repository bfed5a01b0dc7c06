"""recipes/text_pos.py on the real UD English-EWT data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import data_root, run_recipe

pytestmark = pytest.mark.data


def test_fast_dev_run(tmp_path: Path) -> None:
    data_root("ud_english_ewt")
    proc = run_recipe("text_pos", ["fit", "--trainer.fast_dev_run=true"], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "text_pos" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert 0.0 <= metrics["test_acc"] <= 1.0
    assert "test en_ewt-ud-dev.conllu (en_ewt-ud-test.conllu not found: testing on dev)" in proc.stdout
