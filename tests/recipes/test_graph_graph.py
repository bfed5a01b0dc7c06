"""recipes/graph_graph.py on locally generated motif graphs (no data needed), and on generated TU and
Peptides-func files picked by ``--data.name``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _graph_data import write_peptides, write_tu
from _recipes import config_path, recipe_main, run_recipe


def test_fast_dev_run(tmp_path: Path) -> None:
    args = ["fit", "--trainer.fast_dev_run=true", "--data.num_graphs=40", "--data.batch_size=8"]
    proc = run_recipe("graph_graph", args, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "graph_graph" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"} and 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout


def _hparams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    return dict(recipe_main("graph_graph")(list(args), run=False).model.hparams)


def test_a_tu_set_is_one_flag_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--data.name`` (and ``--data.fold``) switch the default config to a TU set: the adapter's input
    width, the class count and the task follow the data."""
    write_tu(tmp_path / "data", graphs=40, classes=3, node_labels=4, edge_labels=2)
    args = [f"--data.root={tmp_path / 'data'}", "--data.name=TOY", "--data.fold=1", "--data.batch_size=8"]
    hp = _hparams(tmp_path, monkeypatch, *args)
    objective = hp["objective"]["class_path"].rpartition(".")[2]
    assert (hp["adapter"]["init_args"]["in_channels"], hp["num_classes"], objective) == (4, 3, "MultiClass")
    run = tmp_path / "run"
    run.mkdir()
    run_recipe("graph_graph", ["fit", "--trainer.fast_dev_run=true", "--torch_threads=1", *args], run)
    metrics = json.loads((run / "runs" / "graph_graph" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}


@pytest.mark.parametrize("name,labels", [("PROTEINS", 3), ("MUTAG", 7)])
def test_the_tu_config_serves_every_set_by_name(name: str, labels: int, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """graph_graph_tu.yaml runs any TU set and fold by ``--data.name`` and ``--data.fold`` alone: mean pooling
    (chosen on validation), the encodings computed by the data, the input width from the node labels (MUTAG's
    edge labels unused)."""
    write_tu(tmp_path / "data", name=name, graphs=30, node_labels=labels, edge_labels=4 if name == "MUTAG" else None)
    config = Path(__file__).parents[2] / "recipes" / "configs" / "graph_graph_tu.yaml"
    args = [f"--config={config}", f"--data.root={tmp_path / 'data'}", "--data.name", name, "--data.fold", "2"]
    hp = _hparams(tmp_path, monkeypatch, *args)
    assert hp["adapter"]["init_args"]["in_channels"] == labels and hp["head"]["init_args"]["pooling"] == "mean"
    run = tmp_path / "run"
    run.mkdir()
    run_recipe("graph_graph", ["fit", *args, "--trainer.max_epochs=1", "--torch_threads=1",
                               "--data.batch_size=4"], run)
    metrics = json.loads(next((run / "runs" / "graph_graph_tu").glob("**/metrics.json")).read_text())
    assert set(metrics) == {"test_acc", "test_loss"}


def test_peptides_make_the_task_multilabel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rdkit")
    write_peptides(tmp_path / "data")
    args = [f"--data.root={tmp_path / 'data'}", "--data.name=peptides-func", "--data.batch_size=3"]
    hp = _hparams(tmp_path, monkeypatch, *args)
    objective = hp["objective"]["class_path"].rpartition(".")[2]
    assert (hp["adapter"]["init_args"]["in_channels"], hp["num_classes"], objective) == (9, 10, "MultiLabel")
    run = tmp_path / "run"
    run.mkdir()
    run_recipe("graph_graph", ["fit", "--trainer.fast_dev_run=true", "--torch_threads=1", *args], run)
    metrics = json.loads((run / "runs" / "graph_graph" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_ap", "test_loss"}


@pytest.mark.parametrize(
    ("config", "attention", "recompute"),
    [("graph_graph_peptides", True, False), ("graph_graph_peptides_mpnn", False, False),
     ("graph_graph_peptides", True, True)],
)
def test_the_peptides_configs(
    config: str, attention: bool, recompute: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Peptides-func configs: categorical atoms and bonds embedded (cardinalities from the data), RWSE of
    16 steps computed once by the data (the adapter's pe linked to it), GINE, within LRGB's 500k parameters;
    a smoke run on generated peptides writes test_ap. With the graph guide's ``--model.encoder.init_args.
    recompute true`` every layer recomputes its activations in the backward, and the run trains as well."""
    pytest.importorskip("rdkit")
    write_peptides(tmp_path / "data")
    path = config_path(f"{config}.yaml")
    args = [f"--config={path}", f"--data.root={tmp_path / 'data'}", "--data.batch_size=4",
            *(["--model.encoder.init_args.recompute", "true"] if recompute else [])]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    cli = recipe_main("graph_graph")(list(args), run=False)
    model, data = cli.model, cli.datamodule
    assert (data.pe, data.pe_dim) == ("random_walk", 16) == (model.adapter.pe, model.adapter.pe_dim)
    assert model.adapter.atoms.cardinalities == data.feature_cardinalities
    assert model.adapter.bonds.cardinalities == data.edge_feature_cardinalities
    assert all(type(layer.conv).__name__ == "GINEConv" for layer in model.encoder.layers)
    assert all((layer.attn is not None) == attention for layer in model.encoder.layers)
    assert all(layer.recompute == recompute for layer in model.encoder.layers)
    params = sum(p.numel() for p in model.parameters())
    assert params == (190_986 if attention else 124_426) and params <= 500_000  # as results.md and graph.md record
    run = tmp_path / "run"
    run.mkdir()
    run_recipe("graph_graph", ["fit", "--trainer.fast_dev_run=true", "--torch_threads=1", *args], run)
    metrics = json.loads((run / "runs" / config / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_ap", "test_loss"} and 0.0 <= metrics["test_ap"] <= 1.0
