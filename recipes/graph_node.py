"""Node classification on a Planetoid citation graph (Cora by default) with graph attention.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/graph_node.yaml`` as default: node
features -> two AttentionConv layers attending along the edges (and self loops), GAT-style -> class
logits per node, trained full-batch on the public split. ``fit`` ends by testing the checkpoint with the
best validation accuracy and writes ``metrics.json`` in the run's log directory.

    python recipes/graph_node.py fit                                   # Cora
    python recipes/graph_node.py fit --trainer.fast_dev_run=true       # smoke run
    python recipes/graph_node.py fit --data.name=CiteSeer --model.num_classes=6 \\
        --model.adapter.init_args.in_channels=3703 --model.head.init_args.d_model=6 ...
"""

from pathlib import Path

from attnmm.data import PlanetoidDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI

CONFIG = Path(__file__).parent / "configs" / "graph_node.yaml"


def main(args: list[str] | None = None) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask,
        PlanetoidDataModule,
        args=args,
        parser_kwargs={cmd: {"default_config_files": [str(CONFIG)]} for cmd in ("fit", "validate", "test", "predict")},
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
