"""Graph classification with a GPS graph transformer on synthetic motif graphs generated locally.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/graph_graph.yaml`` as default: each
graph is a random Barabasi-Albert graph with a house or a 5-cycle motif attached (the label). Node
tokens with random-walk positional encodings -> GPS layers (GIN message passing + global attention over
each graph's nodes with a shortest-path bias, on the packed layout) -> mean pooling per graph -> 2
classes. ``fit`` ends by testing the best checkpoint and writes ``metrics.json`` in the run's log directory.

    python recipes/graph_graph.py fit                               # default config
    python recipes/graph_graph.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/graph_graph.py fit --model.adapter.init_args.pe=laplacian
"""

from pathlib import Path

from attnmm.data import MotifGraphsDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS

CONFIG = Path(__file__).parent / "configs" / "graph_graph.yaml"


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask, MotifGraphsDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS, args=args, run=run,
    )


if __name__ == "__main__":
    main()
