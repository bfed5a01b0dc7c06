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

CONFIG = Path(__file__).parent / "configs" / "text_lm.yaml"


def main(args: list[str] | None = None) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask,
        ShakespeareDataModule,
        args=args,
        parser_kwargs={cmd: {"default_config_files": [str(CONFIG)]} for cmd in ("fit", "validate", "test", "predict")},
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
