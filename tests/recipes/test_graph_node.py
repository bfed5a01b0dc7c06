"""recipes/graph_node.py on the real Cora files, and on a generated Actor graph with one flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _graph_data import write_actor
from _recipes import data_root, run_recipe

from attnmm.lightning import ClassificationTask


@pytest.mark.data
def test_fast_dev_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_root("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    proc = run_recipe("graph_node", ["fit", "--trainer.fast_dev_run=true"], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "graph_node" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"} and 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout


@pytest.mark.data
def test_gat_config_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_root("planetoid")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    config = Path(__file__).parents[2] / "recipes" / "configs" / "graph_node_gat.yaml"
    proc = run_recipe("graph_node", ["fit", "--trainer.fast_dev_run=true", f"--config={config}"], tmp_path)
    assert "GraphAttentionEncoder" in proc.stdout + proc.stderr and "metrics written to" in proc.stdout


def test_actor_is_one_flag_away(tmp_path: Path) -> None:
    """``--data.name Actor`` (and a split) is all it takes: the widths and classes follow the graph."""
    write_actor(tmp_path / "data", features=6, classes=4)
    args = ["fit", "--trainer.max_epochs=1", "--torch_threads=1", f"--data.root={tmp_path / 'data'}",
            "--data.name", "Actor", "--data.split_index", "2"]
    proc = run_recipe("graph_node", args, tmp_path)
    assert "metrics written to" in proc.stdout
    (ckpt,) = tmp_path.glob("runs/**/last.ckpt")
    task = ClassificationTask.load_from_checkpoint(ckpt, weights_only=True)
    assert (task.num_classes, task.adapter.in_channels, type(task.objective).__name__) == (4, 6, "MultiClass")


def test_the_actor_config_keeps_the_ego_apart(tmp_path: Path) -> None:
    """graph_node_actor.yaml: the ego-neighbour encoder over the symmetrised edges without self loops, one
    split picked by its index, the best validation accuracy's checkpoint tested."""
    write_actor(tmp_path / "data")
    config = Path(__file__).parents[2] / "recipes" / "configs" / "graph_node_actor.yaml"
    args = ["fit", f"--config={config}", "--trainer.max_epochs=2", "--torch_threads=1",
            f"--data.root={tmp_path / 'data'}", "--data.split_index", "4", "--data.feature_neighbors", "2"]
    proc = run_recipe("graph_node", args, tmp_path)
    assert "EgoNeighbourEncoder" in proc.stdout + proc.stderr and "metrics written to" in proc.stdout
    metrics = json.loads(next(tmp_path.glob("runs/graph_node_actor/**/metrics.json")).read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert list(tmp_path.glob("runs/graph_node_actor/**/best-epoch=*-val_acc=*.ckpt"))
    (ckpt,) = tmp_path.glob("runs/**/last.ckpt")
    task = ClassificationTask.load_from_checkpoint(ckpt, weights_only=True)
    assert task.adapter.self_loops is False and task.encoder.hops == 1 and task.num_classes == 3
