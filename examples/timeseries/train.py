"""Wave-shape classification with the time-series adapter: the recipe of the new-adapter tutorial.

    python examples/timeseries/train.py fit                               # series.yaml
    python examples/timeseries/train.py fit --trainer.fast_dev_run=true   # smoke run
    python examples/timeseries/train.py fit --model.adapter.init_args.mask=null   # full attention
"""

from pathlib import Path

from series_data import WaveShapesDataModule

from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, WIDTH_LINKS

CONFIG = Path(__file__).parent / "series.yaml"


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    # the adapter's width is the encoder's and the head's; the data's class count the task's and the head's
    return RecipeCLI(
        ClassificationTask, WaveShapesDataModule, config=CONFIG, links=WIDTH_LINKS + CLASS_LINKS, args=args, run=run,
    )


if __name__ == "__main__":
    main()
