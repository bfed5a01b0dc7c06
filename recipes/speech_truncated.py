"""Speech recognition with truncated (windowed or chunked) self-attention.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/speech_truncated.yaml`` as default:
log-mel + convolutional subsampling -> transformer encoder whose self-attention is restricted to a
window of frames (``Padding & Window(left, right)``) -> mean pooling -> 10 digits. The task module and
the DataModule are chosen by ``class_path`` (``--model``, ``--data``): isolated FSDD digits with
``ClassificationTask`` by default, connected digits with ``SequenceTask`` (CTC + attention decoder) in
``configs/speech_truncated_strings.yaml``, any speech DataModule with ``--data``. ``fit`` ends by
testing the best checkpoint and writes ``metrics.json`` in the run's log directory.

    python recipes/speech_truncated.py fit                               # default config
    python recipes/speech_truncated.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/speech_truncated.py fit --model.adapter.init_args.mask=attnmm.masks.Chunk \\
        --model.adapter.init_args.mask.init_args.size=8 --model.adapter.init_args.mask.init_args.left_chunks=2
    python recipes/speech_truncated.py fit --data attnmm.data.SpeechCommandsDataModule   # 16 kHz, linked
    python recipes/speech_truncated.py fit --config recipes/configs/speech_truncated_strings.yaml
"""

from pathlib import Path

from lightning import LightningDataModule

from attnmm.data import FSDDDataModule
from attnmm.lightning import ClassificationTask, EncoderTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "speech_truncated.yaml"
# the adapter's width and the data's classes: the encoder's, the task's and its heads' (a
# ClassificationTask's head; a SequenceTask's CTC head and attention decoder)
SPEECH_LINKS = (
    *WIDTH_LINKS,
    *CLASS_LINKS,
    *(Link("model.adapter.init_args.d_model", f"model.{head}.init_args.d_model") for head in ("ctc_head", "decoder")),
    Link("data.num_classes", "model.ctc_head.init_args.num_classes", apply_on="instantiate"),
    Link("data.num_classes", "model.decoder.init_args.num_classes", apply_on="instantiate"),
    # the adapter's sample rate is the data's, so a config cannot disagree with its data
    Link("data.sample_rate", "model.adapter.init_args.sample_rate", apply_on="instantiate"),
)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        EncoderTask, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
        default_model=ClassificationTask, default_data=FSDDDataModule, config=CONFIG, links=SPEECH_LINKS,
        args=args, run=run,
    )


if __name__ == "__main__":
    main()
