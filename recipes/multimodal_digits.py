"""Audio-visual digits: a spoken digit (FSDD) and an image of the same digit (MNIST), fused by a mask.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/multimodal_digits.yaml`` as default, the
model the fusion study chose on validation (``studies/fusion``): the speech adapter's frames (``Window(16,
4)``) under the shipped ``speech_commands_8k`` encoder (an ``EncodedAdapter`` tower, loaded at the start of
``fit``) and the image adapter's patches (``Grid(7, 7, kernel=3)``), projected to one width with a modality
embedding, are the two segments of one sequence (``MultimodalAdapter``); the fusion pattern is the
``Segments`` mask across them (``late`` here: each modality apart; ``joint``, ``bottleneck`` or ``cross``
by one word). Each modality's own prediction is trained beside the fused one and a learned gate weights
them per item; the gate also learns from gate-only pairs (unfamiliar voices, conflict pairs). Training
pairs get a fresh image at every access and random corruption of either modality. ``fit`` ends by testing
the best checkpoint (lowest validation loss) and writes ``metrics.json``; TensorBoard shows the attention
map and the segment mask.

    python recipes/multimodal_digits.py fit                               # the default
    python recipes/multimodal_digits.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/multimodal_digits.py fit --data.gate_voices=null       # without the Speech Commands folder
    python recipes/multimodal_digits.py fit --model.adapter.init_args.fusion=joint   # another fusion pattern
    python recipes/multimodal_digits.py test --ckpt_path runs/.../best.ckpt --data.audio_snr_db=0 \\
        --data.image_occlusion=14                                       # corrupted test set
    python recipes/multimodal_digits.py test --ckpt_path runs/.../best.ckpt --data.drop_modality=image
"""

from pathlib import Path

from attnmm.data import AVDigitsDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "multimodal_digits.yaml"
# the sample rate of the speech adapter inside the audio tower is the data's (FSDD's recordings)
RATE_LINKS = (Link("data.sample_rate", "model.adapter.init_args.adapters.audio.init_args.adapter.init_args.sample_rate",
                   apply_on="instantiate"),)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    # the fused width (MultimodalAdapter's d_model) is the encoder's and the head's; the classes, the data's
    return RecipeCLI(
        ClassificationTask, AVDigitsDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS + RATE_LINKS, args=args,
        run=run,
    )


if __name__ == "__main__":
    main()
