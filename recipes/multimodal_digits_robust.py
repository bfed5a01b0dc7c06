"""Audio-visual digits, fusion you can trust: robust late fusion by default.

The model of ``multimodal_digits.py`` with each modality's own prediction trained beside the fused one and
weighted per item by a learned gate, a pretrained audio tower (the shipped ``speech_commands_8k``
backbone, loaded at the start of ``fit``), a fresh training image at every access and random corruption
of either modality in training (``configs/multimodal_digits_robust.yaml``). Overlays:
``multimodal_digits_robust_bottleneck.yaml`` (the modalities meet in 4 fusion tokens),
``multimodal_digits_robust_audio.yaml`` and ``multimodal_digits_robust_image.yaml`` (one modality, the
same training). The conditions it is judged under: ``python -m benchmarks.fusion_conditions``.

    python recipes/multimodal_digits_robust.py fit                              # robust late fusion
    python recipes/multimodal_digits_robust.py fit --trainer.fast_dev_run=true  # smoke run
    python recipes/multimodal_digits_robust.py fit --config recipes/configs/multimodal_digits_robust_audio.yaml
"""

from pathlib import Path

from attnmm.data import AVDigitsDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "multimodal_digits_robust.yaml"
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
