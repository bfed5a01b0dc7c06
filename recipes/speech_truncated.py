"""Spoken-digit recognition with truncated (windowed) self-attention.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/speech_truncated.yaml`` as default:
log-mel + convolutional subsampling -> transformer encoder whose self-attention is restricted to a
window of frames (``Padding & Window(left, right)``) -> mean pooling -> 10 digits. ``fit`` ends by
testing the best checkpoint and writes ``metrics.json`` in the run's log directory.

    python recipes/speech_truncated.py fit                               # default config
    python recipes/speech_truncated.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/speech_truncated.py fit --model.adapter.init_args.mask=attnmm.masks.Chunk \\
        --model.adapter.init_args.mask.init_args.size=8 --model.adapter.init_args.mask.init_args.left_chunks=2
"""

from pathlib import Path

from attnmm.data import FSDDDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI

CONFIG = Path(__file__).parent / "configs" / "speech_truncated.yaml"


def main(args: list[str] | None = None) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask,
        FSDDDataModule,
        args=args,
        parser_kwargs={cmd: {"default_config_files": [str(CONFIG)]} for cmd in ("fit", "validate", "test", "predict")},
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
