from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _recipes import RECIPES, recipe_main, write_speech_commands

from attnmm.data import TimeShift
from studies.kws.cnn import PassThrough, Res8Adapter

PEER = RECIPES.parent / "studies" / "kws" / "configs" / "kws_res8.yaml"


def test_res8_tokens_lengths_and_gradients() -> None:
    adapter = Res8Adapter(sample_rate=16000, waveform_augment=TimeShift(0.1))
    batch = {"waveform": torch.randn(3, 16000), "lengths": torch.tensor([16000, 8000, 400])}
    tokens = adapter(batch)  # training mode: SpecAugment and the shift act
    # 98, 48 and 3 mel frames of 25 ms every 10 ms; one token per 4 of them
    assert tokens.x.shape == (3, 24, 45) and tokens.lengths.tolist() == [24, 12, 0]
    assert not hasattr(adapter, "proj") and not hasattr(adapter, "subsample")
    tokens.x.sum().backward()
    assert adapter.stem.weight.grad is not None and adapter.blocks[-1].conv2.weight.grad.abs().sum() > 0
    params = sum(p.numel() for p in adapter.parameters())
    assert 100_000 < params < 120_000  # res8's size: 45 maps, 3 blocks (and the features' LayerNorm)
    x = torch.randn(2, 5, 45)
    assert PassThrough()(x, None) is x
    with pytest.raises(ValueError, match="PassThrough does not return attention weights"):
        PassThrough()(x, None, return_weights=True)


def test_the_peer_overlay_trains_on_the_keyword_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer config swaps the model only: data, split, augmentation and optimiser are the keyword config's."""
    write_speech_commands(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    cli = recipe_main("speech_truncated")([
        "fit", f"--config={RECIPES / 'configs' / 'speech_truncated_commands.yaml'}", f"--config={PEER}",
        "--trainer.fast_dev_run=true", f"--data.root={tmp_path / 'data'}",
    ])
    model = cli.model
    assert isinstance(model.adapter, Res8Adapter) and isinstance(model.encoder, PassThrough)
    assert model.adapter.sample_rate == 16000 and model.num_classes == 12 and model.head.linear.in_features == 45
    assert type(model.adapter.waveform_augment).__name__ == "ChainAugment"  # the keyword config's augmentation
    assert cli.datamodule.noise_augment is not None
    metrics = json.loads((tmp_path / "runs" / "kws_res8" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}


def test_the_conv_candidate_overlay_adds_residual_blocks_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """studies/kws/configs/kws_conv.yaml, the second keyword protocol's candidate, as its documented command runs it (a
    new speaker split, no test after fit): the keyword config's model with residual blocks on its map."""
    write_speech_commands(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    cli = recipe_main("speech_truncated")([
        "fit", f"--config={RECIPES / 'configs' / 'speech_truncated_commands.yaml'}",
        f"--config={RECIPES.parent / 'studies' / 'kws' / 'configs' / 'kws_conv.yaml'}", "--data.init_args.seed=1",
        "--test_after_fit=false", "--trainer.fast_dev_run=true", f"--data.root={tmp_path / 'data'}",
    ])
    adapter = cli.model.adapter
    assert len(adapter.residual_blocks) == 3 and adapter.sample_rate == 16000 and cli.datamodule.seed == 1
    assert type(adapter.waveform_augment).__name__ == "ChainAugment"  # the keyword config's augmentation
    metrics = json.loads((tmp_path / "runs" / "kws_conv" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"val_acc", "val_loss"}  # no test number
