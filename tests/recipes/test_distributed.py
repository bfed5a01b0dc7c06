"""A recipe under DDP on CPU (two processes, gloo): it trains, and its test metrics, reduced across
the processes, equal a single process's on the same checkpoint and data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import generated_args, run_recipe, smoke_params

# graph_graph, tiny: 64 training graphs, 8 validation and 8 test graphs (4 per process: the
# DistributedSampler pads nothing, so each graph is counted exactly once)
TINY = [
    "--data.num_graphs=80", "--data.num_nodes=8", "--data.batch_size=8", "--trainer.max_epochs=2",
    "--model.adapter.init_args.d_model=16",  # the encoder's and the head's too (linked)
    "--model.encoder.init_args.num_layers=1", "--model.encoder.init_args.heads=2",
    "--torch_threads=1", "--trainer.enable_model_summary=false",
]


def test_ddp_two_processes_reduce_test_metrics_like_one(tmp_path: Path) -> None:
    ddp = ["--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu"]
    proc = run_recipe("graph_graph", ["fit", *TINY, *ddp], tmp_path)
    written = sorted(tmp_path.glob("runs/**/metrics.json"))
    assert len(written) == 1 and proc.stdout.count("metrics written to") == 1  # rank 0 only
    (best,) = tmp_path.glob("runs/graph_graph/version_0/checkpoints/best-*.ckpt")
    distributed = json.loads(written[0].read_text())

    single = tmp_path / "single"
    single.mkdir()
    run_recipe("graph_graph", ["test", *TINY, "--trainer.devices=1", f"--ckpt_path={best}"], single)
    (path,) = single.glob("runs/**/metrics.json")
    one = json.loads(path.read_text())
    assert set(one) == set(distributed) == {"test_acc", "test_loss"}
    assert one == pytest.approx(distributed, rel=1e-6, abs=1e-7)




@pytest.mark.parametrize("recipe", smoke_params(exclude=("graph_graph",)))  # graph_graph: above
def test_every_recipe_runs_under_ddp(recipe: str, tmp_path: Path) -> None:
    extra = generated_args(recipe)
    args = ["fit", "--trainer.fast_dev_run=true", "--trainer.strategy=ddp", "--trainer.devices=2",
            "--trainer.accelerator=cpu", "--torch_threads=1", *extra]
    proc = run_recipe(recipe, args, tmp_path)
    assert proc.stdout.count("metrics written to") == 1 and len(list(tmp_path.glob("runs/**/metrics.json"))) == 1
