"""Audio-visual digits: a spoken digit (FSDD) and an image of the same digit (MNIST), fused by a mask.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/multimodal_digits.yaml`` as default:
the speech adapter's frames (``Window(16, 4)``) and the image adapter's patches (``Grid(7, 7,
kernel=3)``), projected to one width with a modality embedding, are the two segments of one sequence
(``MultimodalAdapter``); the fusion pattern is the ``Segments`` mask across them: ``joint`` (every
token attends both modalities), ``late`` (each modality alone, predictions averaged), ``bottleneck``
(the modalities meet only in 4 learned fusion tokens) or ``cross`` (audio queries attend image keys).
Audio-only and image-only configs keep the same model with one modality. ``fit`` ends by testing the
best checkpoint and writes ``metrics.json``; TensorBoard shows the attention map and the segment mask.

    python recipes/multimodal_digits.py fit                               # bottleneck fusion (the default)
    python recipes/multimodal_digits.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/multimodal_digits.py fit --config recipes/configs/multimodal_digits_late.yaml
    python recipes/multimodal_digits.py fit --config recipes/configs/multimodal_digits_audio.yaml
    python recipes/multimodal_digits.py test --ckpt_path runs/.../best.ckpt --data.audio_snr_db=0 \\
        --data.image_occlusion=14                                       # corrupted test set
    python recipes/multimodal_digits.py test --ckpt_path runs/.../best.ckpt --data.drop_modality=image
"""

from pathlib import Path

from attnmm.data import AVDigitsDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "multimodal_digits.yaml"
# the audio adapter's sample rate is the data's (FSDD's recordings), so a config cannot disagree with it
RATE_LINKS = (Link("data.sample_rate", "model.adapter.init_args.adapters.audio.init_args.sample_rate",
                   apply_on="instantiate"),)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    # the fused width (MultimodalAdapter's d_model) is the encoder's and the head's; the classes, the data's
    return RecipeCLI(
        ClassificationTask, AVDigitsDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS + RATE_LINKS, args=args,
        run=run,
    )


if __name__ == "__main__":
    main()
