"""Character language model on Tiny Shakespeare with causal self-attention.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/text_lm.yaml`` as default:
character embeddings -> transformer encoder under a ``Causal`` mask (or a causal window,
``Window(left, 0)``) -> next-character logits. Trains on the first 90% of the text; the last 10% is
cut in half for validation and test. ``test_loss`` is the cross-entropy in nats per character.
After training it prints a short generated sample; ``fit`` ends by testing the best checkpoint and
writes ``metrics.json`` in the run's log directory.

    python recipes/text_lm.py fit                               # default config
    python recipes/text_lm.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/text_lm.py fit --model.adapter.init_args.mask=attnmm.masks.Window \\
        --model.adapter.init_args.mask.init_args.left=64 --model.adapter.init_args.mask.init_args.right=0
"""

from pathlib import Path

from attnmm.data import ShakespeareDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import HEAD_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "text_lm.yaml"

# the character vocabulary (67 ids) is also the set of classes: the next character
VOCAB_LINKS = (
    Link("model.adapter.init_args.vocab_size", "model.num_classes"),
    Link("model.adapter.init_args.vocab_size", "model.head.init_args.num_classes"),
)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask, ShakespeareDataModule, config=CONFIG, links=WIDTH_LINKS + HEAD_LINKS + VOCAB_LINKS,
        args=args, run=run,
    )


if __name__ == "__main__":
    main()
