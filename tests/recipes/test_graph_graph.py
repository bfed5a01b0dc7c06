"""recipes/graph_graph.py on locally generated motif graphs (no data needed)."""

from __future__ import annotations

import json
from pathlib import Path

from _recipes import run_recipe


def test_fast_dev_run(tmp_path: Path) -> None:
    args = ["fit", "--trainer.fast_dev_run=true", "--data.num_graphs=40", "--data.batch_size=8"]
    proc = run_recipe("graph_graph", args, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "graph_graph" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"} and 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout
