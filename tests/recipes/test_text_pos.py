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
    metrics = json.loads((tmp_path / "runs" / "text_pos" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert 0.0 <= metrics["test_acc"] <= 1.0
    assert "test en_ewt-ud-dev.conllu (en_ewt-ud-test.conllu not found: testing on dev)" in proc.stdout


def test_documented_aux_columns_command_gives_one_head_per_column() -> None:
    # docs/recipes/text_pos.md: more auxiliary targets are a data option; the heads follow by links
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))
    import text_pos

    cli = text_pos.main(["--data.aux_columns=[xpos,deprel,feats]", "--data.max_aux_classes=256"], run=False)
    heads = cli.model.objective.aux_heads
    assert list(heads) == ["xpos", "deprel", "feats"]
    assert all(h.linear.in_features == 192 and h.linear.out_features == 256 for h in heads.values())
