"""Node classification on a Planetoid citation graph (Cora by default) or Actor with graph attention.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/graph_node.yaml`` as default: node
features -> an MLP's class predictions -> ten rounds of attention along the edges (and self loops)
that propagate them (predict, then propagate), trained full-batch on the public split;
``--config configs/graph_node_gat.yaml`` trains two GAT-style AttentionConv layers instead. ``fit``
ends by testing the checkpoint with the lowest validation loss and writes ``metrics.json`` in the
run's log directory.

    python recipes/graph_node.py fit                                   # Cora
    python recipes/graph_node.py fit --trainer.fast_dev_run=true       # smoke run
    python recipes/graph_node.py fit --data.name=CiteSeer                # widths and classes follow
    python recipes/graph_node.py fit --data.name=Actor --data.split_index=3  # geom-gcn's fourth split
"""

from pathlib import Path

from attnmm.data import NodeDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import Link

CONFIG = Path(__file__).parent / "configs" / "graph_node.yaml"


def objective_config(task: str) -> dict:
    """The objective of the data's task (one class per graph or node, or binary labels), as a config."""
    return {"class_path": f"attnmm.lightning.{'MultiLabel' if task == 'multilabel' else 'MultiClass'}",
            "init_args": {"target_key": "y"}}

# the graph's sizes: node features in, classes out (the adapter keeps the features: d_model null); its task
GRAPH_LINKS = (
    Link("data.num_classes", "model.num_classes", apply_on="instantiate"),
    Link("data.num_features", "model.adapter.init_args.in_channels", apply_on="instantiate"),
    Link("data.num_features", "model.encoder.init_args.in_channels", apply_on="instantiate"),
    Link("data.num_classes", "model.encoder.init_args.out_channels", apply_on="instantiate"),
    Link("data.task", "model.objective", compute_fn=objective_config, apply_on="instantiate"),
)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(ClassificationTask, NodeDataModule, config=CONFIG, links=GRAPH_LINKS, args=args, run=run)


if __name__ == "__main__":
    main()
