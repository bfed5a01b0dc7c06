"""Universal part-of-speech tagging (UPOS) on UD English-EWT with a transformer encoder.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/text_pos.yaml`` as default: word
embeddings and character-CNN features (vocabularies from the training split only) -> transformer
encoder under ``Padding`` (full attention within each sentence, rotary positions) -> one of 17 tags
per word, with auxiliary XPOS and DEPREL heads trained beside it (multi-task) and an ensemble of
two. Trains on the train file and validates on the dev file; tests on ``en_ewt-ud-test.conllu`` when
it is in the data root, else on the dev file (the run prints which). ``test_acc`` is the token
accuracy; ``fit`` ends by testing the best checkpoint and writes ``metrics.json`` in the run's log
directory.

    python recipes/text_pos.py fit                               # default config
    python recipes/text_pos.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/text_pos.py fit --model.adapter.init_args.mask=attnmm.masks.Window \\
        --model.adapter.init_args.mask.init_args.left=8 --model.adapter.init_args.mask.init_args.right=8
"""

from pathlib import Path

from attnmm.data import UDPOSDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, HEAD_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "text_pos.yaml"

# the vocabularies' caps: the DataModule builds to them, the adapter's embeddings hold them
VOCAB_LINKS = (
    Link("data.max_words", "model.adapter.init_args.vocab_size", apply_on="instantiate"),
    Link("data.max_chars", "model.adapter.init_args.char_vocab_size", apply_on="instantiate"),
)
# the auxiliary heads: one per auxiliary column of the data, of its class cap and the adapter's width
AUX_LINKS = (
    Link("data.aux_columns", "model.objective.init_args.aux_heads.init_args.keys"),
    Link("data.max_aux_classes", "model.objective.init_args.aux_heads.init_args.num_classes"),
    Link("model.adapter.init_args.d_model", "model.objective.init_args.aux_heads.init_args.d_model"),
)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask, UDPOSDataModule, config=CONFIG,
        links=WIDTH_LINKS + HEAD_LINKS + CLASS_LINKS + VOCAB_LINKS + AUX_LINKS,
        args=args, run=run,
    )


if __name__ == "__main__":
    main()
