"""The fusion study's first audio-visual digits model (the multimodal recipe's default before the study
chose robust late fusion): a speech adapter and an image adapter as two segments of one ``Segments`` mask,
fused by the pattern the config names (``configs/legacy_default.yaml``: bottleneck; the overlays
``legacy_{joint,late,cross,audio,image}.yaml``). Kept so that the study's earlier candidates run again:

    python studies/fusion/legacy_recipe.py fit --config studies/fusion/configs/legacy_late.yaml
"""

from pathlib import Path

from attnmm.data import AVDigitsDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS, Link

CONFIG = Path(__file__).parent / "configs" / "legacy_default.yaml"
# the audio adapter's sample rate is the data's (FSDD's recordings), so a config cannot disagree with it
RATE_LINKS = (Link("data.sample_rate", "model.adapter.init_args.adapters.audio.init_args.sample_rate",
                   apply_on="instantiate"),)


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask, AVDigitsDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS + RATE_LINKS, args=args,
        run=run,
    )


if __name__ == "__main__":
    main()
