"""The fusion study's candidates and peers build and train: its first default (bottleneck fusion) and the
fusion patterns of ``studies/fusion/legacy_recipe.py``, and the overlays of the multimodal recipe's
default (``studies/fusion/configs/robust_*.yaml``), on generated FSDD recordings, MNIST files and Speech
Commands voices."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _recipes import RECIPES, write_fsdd, write_mnist, write_speech_commands

from attnmm.adapters import MultimodalAdapter
from attnmm.lightning import Transfer
from attnmm.masks import Segments

STUDY = RECIPES.parent / "studies" / "fusion"
SMALL = ["--data.image_val_size=100", "--data.batch_size=8"]


@pytest.fixture(scope="module")
def generated_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_fsdd(root, speakers=("ann", "bob", "cid"), takes=7)
    write_mnist(root)
    write_speech_commands(root, speakers=4, silence=0)  # the gate voices
    return root


def _main(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _cli(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.chdir(tmp_path)
    return _main(path)([*args, "--trainer.logger=false"], run=False)


def _fit(recipe: Path, args: list[str], cwd: Path) -> dict[str, float]:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore", "ATTNMM_CACHE": str(cwd / "cache")}
    proc = subprocess.run([sys.executable, str(recipe), "fit", "--trainer.fast_dev_run=true", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        pytest.fail(f"{recipe.name} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    (metrics,) = (cwd / "runs").glob("*/version_*/metrics.json")
    return json.loads(metrics.read_text())


LEGACY = STUDY / "legacy_recipe.py"


@pytest.mark.parametrize("config", [None, "joint", "late", "cross", "audio", "image"])
def test_legacy_fast_dev_run(generated_root: Path, tmp_path: Path, config: str | None) -> None:
    extra = [] if config is None else [f"--config={STUDY / 'configs' / f'legacy_{config}.yaml'}"]
    metrics = _fit(LEGACY, [f"--data.root={generated_root}", *SMALL, *extra], tmp_path)
    assert set(metrics) == {"test_acc", "test_loss"}


@pytest.mark.parametrize(
    ("config", "fusion", "names", "num_segments"),
    [
        (None, "bottleneck", ["audio", "image", "fusion"], None),  # the first default, chosen on clean validation
        ("joint", "joint", ["audio", "image"], None),
        ("late", "late", ["audio", "image"], 2),
        ("cross", "cross", ["audio", "image"], None),
        ("audio", "joint", ["audio"], None),
        ("image", "joint", ["image"], None),
    ],
)
def test_each_legacy_config_builds_the_same_model_with_its_fusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str | None, fusion: str, names: list[str],
    num_segments: int | None,
) -> None:
    extra = [] if config is None else [f"--config={STUDY / 'configs' / f'legacy_{config}.yaml'}"]
    cli = _cli(LEGACY, tmp_path, monkeypatch, *extra)
    adapter = cli.model.adapter
    assert isinstance(adapter, MultimodalAdapter) and adapter.fusion == fusion
    assert adapter.segment_names == names and cli.model.head.num_segments == num_segments
    base = _cli(LEGACY, tmp_path, monkeypatch)
    for name in adapter.names:  # each modality's adapter is the base config's
        assert repr(adapter.adapters[name]) == repr(base.model.adapter.adapters[name])
        assert repr(adapter.adapters[name].mask) == repr(base.model.adapter.adapters[name].mask)
    assert repr(cli.model.encoder) == repr(base.model.encoder)
    assert cli.model.encoder.layers[0].norm1.normalized_shape == (adapter.out_dim,)
    assert cli.model.head.linears[0].weight.shape == (10, adapter.out_dim) and cli.model.num_classes == 10


def test_legacy_default_lays_out_three_segments(
    generated_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = _cli(LEGACY, tmp_path, monkeypatch, f"--data.root={generated_root}", *SMALL)
    cli.datamodule.setup("fit")
    batch = next(iter(cli.datamodule.val_dataloader()))
    _, tokens, _ = cli.model.encode(batch)
    assert isinstance(tokens.mask, Segments) and tokens.mask.lengths.shape == (8, 3)  # audio, image, fusion
    assert torch.isfinite(cli.model(batch)).all()


RECIPE = RECIPES / "multimodal_digits.py"


@pytest.mark.parametrize("config", ["robust_late", "robust_bottleneck", "robust_audio", "robust_image", "robust_gate"])
def test_robust_fast_dev_run(generated_root: Path, tmp_path: Path, config: str) -> None:
    """The overlays of the recipe's default: fit validates without a test when asked."""
    args = [f"--data.root={generated_root}", *SMALL, f"--config={STUDY / 'configs' / f'{config}.yaml'}",
            "--test_after_fit=false", "--data.val_speakers=[cid]"]
    assert set(_fit(RECIPE, args, tmp_path)) == {"val_acc", "val_loss"}  # no test number


@pytest.mark.parametrize(
    ("config", "names", "num_segments", "gate", "weight", "init_from", "voices", "conflicts"),
    [
        ("robust_late", ["audio", "image"], 2, True, 1.0, "speech_commands_8k", None, 0.0),
        ("robust_bottleneck", ["audio", "image", "fusion"], 3, True, 1.0, "speech_commands_8k", None, 0.0),
        ("robust_audio", ["audio"], None, False, 0.0, "speech_commands_8k", None, 0.0),
        ("robust_image", ["image"], None, False, 0.0, None, None, 0.0),
        ("robust_gate", ["audio", "image"], 2, True, 1.0, "speech_commands_8k", "speech_commands_test_v0.02", 0.0),
        ("robust_conflict_light", ["audio", "image"], 2, True, 1.0, "speech_commands_8k",
         "speech_commands_test_v0.02", 0.1),
    ],
)
def test_robust_configs_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, names: list[str], num_segments: int | None,
    gate: bool, weight: float, init_from: str | None, voices: str | None, conflicts: float,
) -> None:
    cli = _cli(RECIPE, tmp_path, monkeypatch, f"--config={STUDY / 'configs' / f'{config}.yaml'}")
    model = cli.model
    assert cli.datamodule.gate_voices == voices and cli.datamodule.gate_conflicts == conflicts
    assert model.adapter.segment_names == names and model.head.num_segments == num_segments
    assert (model.head.gate is not None) == gate and model.objective.weight == weight
    (transfer,) = [c for c in cli.trainer.callbacks if isinstance(c, Transfer)]
    assert transfer.init_from == init_from
    if "audio" in names:
        assert model.adapter.adapters["audio"].adapter.sample_rate == 8000  # linked to the data
