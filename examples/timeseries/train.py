"""Wave-shape classification with the time-series adapter: the recipe of the new-adapter tutorial.

    python examples/timeseries/train.py fit                               # series.yaml
    python examples/timeseries/train.py fit --trainer.fast_dev_run=true   # smoke run
    python examples/timeseries/train.py fit --model.adapter.init_args.mask=null   # full attention
"""

from pathlib import Path

from series_data import WaveShapesDataModule

from attnmm.lightning import ClassificationTask, RecipeCLI

CONFIG = Path(__file__).parent / "series.yaml"


def main(args: list[str] | None = None) -> RecipeCLI:
    return RecipeCLI(
        ClassificationTask,
        WaveShapesDataModule,
        args=args,
        parser_kwargs={cmd: {"default_config_files": [str(CONFIG)]} for cmd in ("fit", "validate", "test", "predict")},
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
