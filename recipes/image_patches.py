"""Digit recognition on MNIST with attention over a grid of image patches.

Runs a LightningCLI (fit, validate, test, predict) with ``configs/image_patches.yaml`` as default:
4 x 4 patch embedding with a 2-D sinusoidal encoding -> transformer encoder whose patches attend to
their 3 x 3 neighbourhood (``Grid(7, 7, kernel=3)``) with a relative position bias -> mean pooling
-> 10 digits. When only MNIST's 10k test set is in the data root (the offline copy), its first
8,000 images train and validate and its last 2,000 test; with torchvision's four MNIST files, the
usual 60k / 10k split; CIFAR-10 from torchvision's files with ``image_patches_cifar.yaml``.
``fit`` ends by testing the best checkpoint and writes ``metrics.json``.

    python recipes/image_patches.py fit                               # Grid(7, 7, kernel=3)
    python recipes/image_patches.py fit --trainer.fast_dev_run=true   # smoke run
    python recipes/image_patches.py fit --config studies/recipe_runs/configs/image_patches_full.yaml  # full attention
    python recipes/image_patches.py fit --config studies/recipe_runs/configs/image_patches_cnn.yaml   # CNN baseline
    python recipes/image_patches.py fit --config recipes/configs/image_patches_cifar.yaml # CIFAR-10
"""

from pathlib import Path

from attnmm.data import MNISTDataModule
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.lightning.cli import CLASS_LINKS, HEAD_LINKS, WIDTH_LINKS

CONFIG = Path(__file__).parent / "configs" / "image_patches.yaml"


def main(args: list[str] | None = None, run: bool = True) -> RecipeCLI:
    # data.class_path picks MNISTDataModule or a subclass (CIFAR10DataModule)
    return RecipeCLI(
        ClassificationTask, MNISTDataModule, subclass_mode_data=True, config=CONFIG,
        links=WIDTH_LINKS + HEAD_LINKS + CLASS_LINKS, args=args, run=run,
    )


if __name__ == "__main__":
    main()
