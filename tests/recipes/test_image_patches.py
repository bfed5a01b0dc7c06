"""recipes/image_patches.py on the offline MNIST test set (Grid, full attention and the CNN baseline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import config_path, data_root, recipe_main, run_recipe

pytestmark = pytest.mark.data


@pytest.mark.parametrize("config", [None, "image_patches_cnn.yaml"])
def test_fast_dev_run(tmp_path: Path, config: str | None) -> None:
    data_root("MNIST")
    extra = [] if config is None else [f"--config={config_path(config)}"]
    proc = run_recipe("image_patches", ["fit", "--trainer.fast_dev_run=true", *extra], tmp_path)
    run = "image_patches" if config is None else config.removesuffix(".yaml")  # named after the config
    metrics = json.loads((tmp_path / "runs" / run / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert "first 8,000 images train/validate, the last 2,000 test" in proc.stdout


@pytest.mark.parametrize("config", ["image_patches_full.yaml", "image_patches_cifar.yaml"])
def test_other_configs_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    from attnmm.data import CIFAR10DataModule

    monkeypatch.chdir(tmp_path)
    args = [f"--config={config_path(config)}", "--trainer.logger=false"]
    cli = recipe_main("image_patches")(args, run=False)
    if config == "image_patches_full.yaml":
        assert cli.model.adapter.mask is None and cli.model.encoder.position_bias.grid_size == (7, 7)
    else:
        assert isinstance(cli.datamodule, CIFAR10DataModule) and cli.model.adapter.in_channels == 3
