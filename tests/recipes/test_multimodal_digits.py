"""recipes/multimodal_digits.py on generated FSDD recordings, MNIST files and Speech Commands voices: the
smoke run of its default (robust late fusion with a gate that meets unfamiliar voices and conflict pairs),
of another fusion pattern and of a corrupted, one-modality test set; what the default builds; the attention
map and segment mask the TensorBoard callback draws. The fusion study's candidate configs:
tests/studies/test_fusion_configs.py."""

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

from attnmm.lightning import Transfer
from attnmm.masks import Segments

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


@pytest.mark.parametrize("fusion", [None, "joint"])
def test_fast_dev_run(generated_root: Path, tmp_path: Path, fusion: str | None) -> None:
    extra = [] if fusion is None else [f"--model.adapter.init_args.fusion={fusion}"]
    args = ["fit", "--trainer.fast_dev_run=true", f"--data.root={generated_root}", *SMALL, *extra]
    run_recipe("multimodal_digits", args, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "multimodal_digits" / "version_0" / "metrics.json").read_text())
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


def test_attention_map_shows_the_segment_mask(
    generated_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    from attnmm.lightning import AttentionMapLogger

    cli = _cli(tmp_path, monkeypatch, f"--data.root={generated_root}", *SMALL)
    cli.datamodule.setup("fit")
    batch = next(iter(cli.datamodule.val_dataloader()))
    _, tokens, _ = cli.model.encode(batch)
    assert isinstance(tokens.mask, Segments) and tokens.mask.lengths.shape == (8, 2)  # audio, image
    figs = AttentionMapLogger().figures(cli.model, batch)
    assert set(figs) == {"attention_map", "mask"}
    for fig in figs.values():
        plt.close(fig)
    assert torch.isfinite(cli.model(batch)).all()


def test_the_documented_corruption_options_reach_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = _cli(tmp_path, monkeypatch, "--data.audio_snr_db=0", "--data.image_occlusion=14", "--data.corrupt=one")
    data = cli.datamodule
    assert (data.audio_snr_db, data.image_occlusion, data.corrupt) == (0.0, 14, "one")


def test_fit_validates_without_a_test_when_asked(generated_root: Path, tmp_path: Path) -> None:
    """The pretrained tower loads, the training pairs are corrupted and drawn afresh, the gate's gate-only
    pairs join them, and fit validates without a test when asked."""
    args = ["fit", "--trainer.fast_dev_run=true", f"--data.root={generated_root}", *SMALL,
            "--test_after_fit=false", "--data.val_speakers=[cid]"]
    run_recipe("multimodal_digits", args, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "multimodal_digits" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"val_acc", "val_loss"}  # no test number


def test_the_default_builds_the_chosen_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.adapters import EncodedAdapter
    from attnmm.lightning.pretrained import backbone_state

    cli = _cli(tmp_path, monkeypatch)
    model = cli.model
    assert cli.datamodule.gate_voices == "speech_commands_test_v0.02" and cli.datamodule.gate_conflicts == 0.3
    assert model.adapter.fusion == "late" and model.adapter.segment_names == ["audio", "image"]
    assert model.head.num_segments == 2 and model.head.gate is not None and model.objective.weight == 1.0
    (transfer,) = [c for c in cli.trainer.callbacks if isinstance(c, Transfer)]
    assert transfer.init_from == "speech_commands_8k"
    tower = model.adapter.adapters["audio"]  # the tower takes the shipped backbone, entry for entry
    assert isinstance(tower, EncodedAdapter) and tower.adapter.sample_rate == 8000  # linked to the data
    transfer.setup(cli.trainer, model, "fit")
    state = backbone_state("speech_commands_8k")
    assert torch.equal(tower.encoder.layers[3].ffn[0].weight, state["encoder.layers.3.ffn.0.weight"])
    # written once: the fused width and the data's classes reach the encoder, the head and the task
    assert model.encoder.layers[0].norm1.normalized_shape == (model.adapter.out_dim,)
    assert model.num_classes == 10
