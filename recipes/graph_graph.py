"""Graph classification with a GPS graph transformer: generated motif graphs, a TU set or Peptides-func.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/graph_graph.yaml`` as default: each
graph is a random Barabasi-Albert graph with a house or a 5-cycle motif attached (the label). Node
tokens with random-walk positional encodings -> GPS layers (GIN message passing + global attention over
each graph's nodes with a shortest-path bias, on the packed layout) -> mean pooling per graph -> 2
classes. ``--data.name`` picks other data (``GraphDataModule``): a TU set under its 10-fold protocol
(``--data.fold``), or LRGB's Peptides-func (10 labels per graph, multi-label); the feature width, the
class count and the task (multi-class or multi-label) follow the data. ``fit`` ends by testing the
best checkpoint and writes ``metrics.json`` in the run's log directory.

    python recipes/graph_graph.py fit                               # default config
    python recipes/graph_graph.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/graph_graph.py fit --model.adapter.init_args.pe=laplacian
    python recipes/graph_graph.py fit --data.name PROTEINS --data.fold 3
"""

from pathlib import Path

from attnmm.data import GraphDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "graph_graph.yaml"


def objective_config(task: str) -> dict:
    """The objective of the data's task (one class per graph or node, or binary labels), as a config."""
    return {"class_path": f"attnmm.lightning.{'MultiLabel' if task == 'multilabel' else 'MultiClass'}",
            "init_args": {"target_key": "y"}}

# the data's node features in (embedded per column where they are categories, bonds too), and its task (one
# class, or binary labels, per graph); the data computes the adapter's positional encoding once per graph
DATA_LINKS = (
    Link("data.num_features", "model.adapter.init_args.in_channels", apply_on="instantiate"),
    Link("data.feature_cardinalities", "model.adapter.init_args.cardinalities", apply_on="instantiate"),
    Link("data.edge_feature_cardinalities", "model.adapter.init_args.edge_cardinalities", apply_on="instantiate"),
    Link("data.task", "model.objective", compute_fn=objective_config, apply_on="instantiate"),
    Link("model.adapter.init_args.pe", "data.pe"),
    Link("model.adapter.init_args.pe_dim", "data.pe_dim"),
)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask, GraphDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS + DATA_LINKS, args=args,
        run=run,
    )


if __name__ == "__main__":
    main()
