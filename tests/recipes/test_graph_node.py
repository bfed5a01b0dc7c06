"""recipes/graph_node.py on the real Cora files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import data_root, run_recipe

pytestmark = pytest.mark.data


def test_fast_dev_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_root("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    proc = run_recipe("graph_node", ["fit", "--trainer.fast_dev_run=true"], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "graph_node" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"} and 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout


def test_gat_config_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_root("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    config = Path(__file__).parents[2] / "recipes" / "configs" / "graph_node_gat.yaml"
    proc = run_recipe("graph_node", ["fit", "--trainer.fast_dev_run=true", f"--config={config}"], tmp_path)
    assert "GraphAttentionEncoder" in proc.stdout + proc.stderr and "metrics written to" in proc.stdout
