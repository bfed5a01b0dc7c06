"""recipes/multimodal_digits.py on generated FSDD recordings and MNIST files: the smoke run of every
config (each fusion pattern, audio only, image only) and of a corrupted, one-modality test set; what
each config builds; the attention map and segment mask the TensorBoard callback draws."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from _recipes import RECIPES, run_recipe, write_speech_commands

from attnmm.adapters import MultimodalAdapter
from attnmm.masks import Segments

CONFIGS = RECIPES / "configs"
SMALL = ["--data.image_val_size=100", "--data.batch_size=8"]


def _write_idx(path: Path, values: np.ndarray) -> None:
    magic = 2051 if values.ndim == 3 else 2049
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in values.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + values.astype(np.uint8).tobytes())


@pytest.fixture(scope="module")
def generated_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    recordings = root / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    g = np.random.default_rng(0)
    for speaker in ("ann", "bob", "cid"):
        for digit in range(10):
            for index in range(7):  # takes 0-4 are the test set
                clip = (0.1 * g.standard_normal(1200 + 40 * digit)).astype(np.float32)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip, 8000, subtype="PCM_16")
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for part, n in (("train", 300), ("t10k", 200)):
        _write_idx(raw / f"{part}-images-idx3-ubyte.gz", g.integers(0, 256, (n, 28, 28)))
        _write_idx(raw / f"{part}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    write_speech_commands(root, speakers=4, silence=0)  # the gate voices of the robust_gate overlay
    return root


@pytest.mark.parametrize(
    "config",
    [None, "joint", "late", "bottleneck", "cross", "audio", "image"],
)
def test_fast_dev_run(generated_root: Path, tmp_path: Path, config: str | None) -> None:
    extra = [] if config is None else [f"--config={CONFIGS / f'multimodal_digits_{config}.yaml'}"]
    args = ["fit", "--trainer.fast_dev_run=true", f"--data.root={generated_root}", *SMALL, *extra]
    run_recipe("multimodal_digits", args, tmp_path)
    run = "multimodal_digits" + ("" if config is None else f"_{config}")  # named after the config
    metrics = json.loads((tmp_path / "runs" / run / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}


def test_corrupted_test_set_without_images(generated_root: Path, tmp_path: Path) -> None:
    corrupt = ["--data.audio_snr_db=0", "--data.image_occlusion=14", "--data.drop_modality=image"]
    args = ["fit", "--trainer.fast_dev_run=true", f"--data.root={generated_root}", *SMALL, *corrupt]
    run_recipe("multimodal_digits", args, tmp_path)
    assert (tmp_path / "runs" / "multimodal_digits" / "version_0" / "metrics.json").is_file()


def _cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str):
    """The recipe's own CLI (its default config and links), built without running."""
    spec = importlib.util.spec_from_file_location("multimodal_digits", RECIPES / "multimodal_digits.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    monkeypatch.chdir(tmp_path)
    return recipe.main([*args, "--trainer.logger=false"], run=False)


@pytest.mark.parametrize(
    ("config", "fusion", "names", "num_segments"),
    [
        (None, "bottleneck", ["audio", "image", "fusion"], None),  # the default, chosen on validation
        ("joint", "joint", ["audio", "image"], None),
        ("late", "late", ["audio", "image"], 2),
        ("bottleneck", "bottleneck", ["audio", "image", "fusion"], None),
        ("cross", "cross", ["audio", "image"], None),
        ("audio", "joint", ["audio"], None),
        ("image", "joint", ["image"], None),
    ],
)
def test_each_config_builds_the_same_model_with_its_fusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str | None, fusion: str, names: list[str],
    num_segments: int | None,
) -> None:
    extra = [] if config is None else [f"--config={CONFIGS / f'multimodal_digits_{config}.yaml'}"]
    cli = _cli(tmp_path, monkeypatch, *extra)
    adapter = cli.model.adapter
    assert isinstance(adapter, MultimodalAdapter) and adapter.fusion == fusion
    assert adapter.segment_names == names and cli.model.head.num_segments == num_segments
    base = _cli(tmp_path, monkeypatch)
    for name in adapter.names:  # each modality's adapter is the base config's
        assert repr(adapter.adapters[name]) == repr(base.model.adapter.adapters[name])
        assert repr(adapter.adapters[name].mask) == repr(base.model.adapter.adapters[name].mask)
    assert repr(cli.model.encoder) == repr(base.model.encoder)
    # written once: the fused width and the data's classes reach the encoder, the head and the task
    assert cli.model.encoder.layers[0].norm1.normalized_shape == (adapter.out_dim,)
    assert cli.model.head.linears[0].weight.shape == (10, adapter.out_dim) and cli.model.num_classes == 10


def test_attention_map_shows_the_segment_mask(
    generated_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    from attnmm.lightning import AttentionMapLogger

    cli = _cli(tmp_path, monkeypatch, f"--data.root={generated_root}", *SMALL)
    cli.datamodule.setup("fit")
    batch = next(iter(cli.datamodule.val_dataloader()))
    _, tokens, _ = cli.model.encode(batch)
    assert isinstance(tokens.mask, Segments) and tokens.mask.lengths.shape == (8, 3)  # audio, image, fusion
    figs = AttentionMapLogger().figures(cli.model, batch)
    assert set(figs) == {"attention_map", "mask"}
    for fig in figs.values():
        plt.close(fig)
    assert torch.isfinite(cli.model(batch)).all()


def test_the_documented_corruption_options_reach_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = _cli(tmp_path, monkeypatch, "--data.audio_snr_db=0", "--data.image_occlusion=14", "--data.corrupt=one")
    data = cli.datamodule
    assert (data.audio_snr_db, data.image_occlusion, data.corrupt) == (0.0, 14, "one")


@pytest.mark.parametrize("config", [None, "bottleneck", "audio", "image", "gate"])
def test_robust_fast_dev_run(generated_root: Path, tmp_path: Path, config: str | None) -> None:
    """recipes/multimodal_digits_robust.py (issue 27) and its overlays: the pretrained tower loads, the
    training pairs are corrupted and drawn afresh, and fit validates without a test when asked."""
    extra = [] if config is None else [f"--config={CONFIGS / f'multimodal_digits_robust_{config}.yaml'}"]
    args = ["fit", "--trainer.fast_dev_run=true", f"--data.root={generated_root}", *SMALL, *extra,
            "--test_after_fit=false", "--data.val_speakers=[cid]"]
    run_recipe("multimodal_digits_robust", args, tmp_path)
    run = "multimodal_digits_robust" + ("" if config is None else f"_{config}")
    metrics = json.loads((tmp_path / "runs" / run / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"val_acc", "val_loss"}  # no test number


@pytest.mark.parametrize(
    ("config", "names", "num_segments", "gate", "weight", "init_from"),
    [
        (None, ["audio", "image"], 2, True, 1.0, "speech_commands_8k"),
        ("bottleneck", ["audio", "image", "fusion"], 3, True, 1.0, "speech_commands_8k"),
        ("audio", ["audio"], None, False, 0.0, "speech_commands_8k"),
        ("image", ["image"], None, False, 0.0, None),
        ("gate", ["audio", "image"], 2, True, 1.0, "speech_commands_8k"),
        ("conflict", ["audio", "image"], 2, True, 1.0, "speech_commands_8k"),
        ("conflict_light", ["audio", "image"], 2, True, 1.0, "speech_commands_8k"),
    ],
)
def test_robust_configs_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str | None, names: list[str], num_segments: int | None,
    gate: bool, weight: float, init_from: str | None,
) -> None:
    from attnmm.adapters import EncodedAdapter
    from attnmm.lightning.pretrained import backbone_state

    spec = importlib.util.spec_from_file_location("robust", RECIPES / "multimodal_digits_robust.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    monkeypatch.chdir(tmp_path)
    extra = [] if config is None else [f"--config={CONFIGS / f'multimodal_digits_robust_{config}.yaml'}"]
    cli = recipe.main([*extra, "--trainer.logger=false"], run=False)
    model = cli.model
    gated = config in ("gate", "conflict", "conflict_light")
    assert cli.datamodule.gate_voices == ("speech_commands_test_v0.02" if gated else None)
    assert cli.datamodule.gate_conflicts == {"conflict": 0.3, "conflict_light": 0.1}.get(config, 0.0)
    assert model.adapter.segment_names == names and model.head.num_segments == num_segments
    assert (model.head.gate is not None) == gate and model.segment_loss_weight == weight
    assert model.init_from == init_from
    if "audio" in names:  # the tower takes the shipped backbone, entry for entry
        tower = model.adapter.adapters["audio"]
        assert isinstance(tower, EncodedAdapter) and tower.adapter.sample_rate == 8000  # linked to the data
        model.setup("fit")
        state = backbone_state("speech_commands_8k")
        assert torch.equal(tower.encoder.layers[3].ffn[0].weight, state["encoder.layers.3.ffn.0.weight"])
