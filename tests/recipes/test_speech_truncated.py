"""recipes/speech_truncated.py on the real FSDD data, and every command of docs/recipes/speech.md on
generated FSDD and Speech Commands folders."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from _recipes import RECIPES, data_root, recipe_main, run_recipe, write_fsdd, write_speech_commands

from attnmm.lightning import Transfer

ROOT = RECIPES.parent
PAGE = ROOT / "docs" / "recipes" / "speech.md"
CONFIGS = RECIPES / "configs"


def documented_commands() -> list[list[str]]:
    """The arguments of every ``python recipes/speech_truncated.py`` line of the page's bash blocks."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("python recipes/speech_truncated.py"):
                commands.append(shlex.split(line)[2:])
    return commands


def _write_speech_commands(root: Path) -> None:
    from attnmm.data.speech_commands import CORE_COMMANDS

    version_dir = root / "SpeechCommands" / "speech_commands_v0.02"
    g = np.random.default_rng(0)
    for word in CORE_COMMANDS:
        (version_dir / word).mkdir(parents=True)
        for s in range(3):
            clip = (0.1 * g.standard_normal(8000)).astype(np.float32)
            soundfile.write(version_dir / word / f"spk{s}_nohash_0.wav", clip, 16000, subtype="PCM_16")
    (version_dir / "validation_list.txt").write_text("".join(f"{w}/spk1_nohash_0.wav\n" for w in CORE_COMMANDS))
    (version_dir / "testing_list.txt").write_text("".join(f"{w}/spk2_nohash_0.wav\n" for w in CORE_COMMANDS))


@pytest.fixture(scope="module")
def generated_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_fsdd(root, speakers=("ann", "bob", "theo", "yweweler"))  # the page's commands name theo and yweweler
    _write_speech_commands(root)  # the full v0.02 layout with its official lists
    write_speech_commands(root, speakers=20)  # the 12 class folders of the test companion set
    return root


def test_the_page_documents_the_commands() -> None:
    commands = [" ".join(c) for c in documented_commands()]
    assert "fit --data attnmm.data.SpeechCommandsDataModule --data.sample_rate=8000" in commands
    assert "fit --config recipes/configs/speech_truncated_strings.yaml" in commands
    assert len(commands) >= 8


@pytest.mark.parametrize("args", documented_commands(), ids=" ".join)
def test_documented_command(args: list[str], generated_root: Path, tmp_path: Path, monkeypatch) -> None:
    """Each documented command runs (one batch per stage) on generated data and writes metrics.json."""
    monkeypatch.chdir(tmp_path)
    main = recipe_main("speech_truncated")
    args = [str(ROOT / a) if a.startswith(("recipes/", "studies/")) else a.replace("=recipes/", f"={ROOT}/recipes/")
            for a in args]
    if "--help" in args:
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 0
        return
    cli = main([*args, "--trainer.fast_dev_run=true", f"--data.root={generated_root}", "--data.download=false"])
    (metrics_path,) = tmp_path.glob("runs/*/version_0/metrics.json")
    metrics = json.loads(metrics_path.read_text())
    if "SpeechCommandsDataModule" in args:
        from attnmm.data import SpeechCommandsDataModule

        rate = 8000 if "--data.sample_rate=8000" in args else 16000
        assert isinstance(cli.datamodule, SpeechCommandsDataModule) and cli.model.adapter.sample_rate == rate
    if "--config" not in " ".join(args) and "--data" not in args:  # the default config: FSDD and the extra voices
        voices = cli.datamodule.voices_set
        if "--data.extra_voices=null" in args:
            assert voices is None
        else:  # the generated folder's 20 speakers each say the ten digits once
            assert voices is not None and len(voices) == 200 and voices.num_speakers == 20
    if any("strings" in a for a in args):
        assert set(metrics) == {"test_der", "test_loss", "test_string_acc"}
    else:
        assert set(metrics) == {"test_acc", "test_loss"}


def test_the_default_trains_without_the_extra_voices_folder(tmp_path: Path, monkeypatch) -> None:
    """Where only FSDD is, the default config warns that the extra voices are missing and trains on FSDD alone."""
    write_fsdd(tmp_path / "data", speakers=("ann", "bob"))
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="no Speech Commands folder at .*training on FSDD's voices alone"):
        cli = recipe_main("speech_truncated")(
            ["fit", "--trainer.fast_dev_run=true", f"--data.root={tmp_path / 'data'}", "--data.download=false"])
    assert cli.datamodule.voices_set is None and cli.datamodule.extra_voices == "speech_commands_test_v0.02"


@pytest.mark.data
def test_fast_dev_run(tmp_path: Path) -> None:
    data_root("fsdd")
    proc = run_recipe("speech_truncated", ["fit", "--trainer.fast_dev_run=true"], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "speech_truncated" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout


@pytest.mark.data
def test_short_fit_writes_loadable_checkpoint(tmp_path: Path) -> None:
    data_root("fsdd")
    args = [
        "fit", "--trainer.max_steps=3", "--trainer.limit_val_batches=2", "--trainer.limit_test_batches=2",
        "--model.adapter.init_args.mask=attnmm.masks.Chunk",
        "--model.adapter.init_args.mask.init_args.size=4", "--model.adapter.init_args.mask.init_args.left_chunks=1",
    ]
    run_recipe("speech_truncated", args, tmp_path)
    run_dir = tmp_path / "runs" / "speech_truncated" / "version_0"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"test_acc", "test_loss"} <= set(metrics)
    assert any(p.name.startswith("events.out.tfevents") for p in run_dir.iterdir())  # TensorBoard
    assert (run_dir.parent / "csv" / "version_0" / "metrics.csv").exists()  # CSV logger
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    from attnmm.adapters import SpeechAdapter
    from attnmm.lightning import ClassificationTask
    from attnmm.masks import Chunk

    task = ClassificationTask.load_from_checkpoint(ckpt, weights_only=True)  # rebuilt from the saved config
    assert isinstance(task.adapter, SpeechAdapter) and isinstance(task.adapter.mask, Chunk)
    assert task.eval()(SpeechAdapter.example_batch(2)).shape == (2, 10)
    assert torch.isfinite(task(SpeechAdapter.example_batch(1))).all()


# ------------------------------------------------------------------ many voices: keyword spotting, pretraining


@pytest.fixture(scope="module")
def commands_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated Speech Commands class folders (10 speakers, every word) and FSDD recordings."""
    root = tmp_path_factory.mktemp("commands")
    write_speech_commands(root)
    write_fsdd(root)
    return root


def test_commands_config(commands_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyword-spotting config: 12 classes at 16 kHz (the adapter's rate linked to the data's),
    speakers disjoint, noise from the training silence clips, time shift and speed perturbation."""
    from attnmm.data import ChainAugment, SpeechCommandsDataModule, SpeedPerturb, TimeShift

    monkeypatch.chdir(tmp_path)
    cli = recipe_main("speech_truncated")([
        "fit", f"--config={CONFIGS / 'speech_truncated_commands.yaml'}", "--trainer.fast_dev_run=true",
        f"--data.root={commands_root}",
    ])
    dm = cli.datamodule
    assert isinstance(dm, SpeechCommandsDataModule) and dm.num_classes == 12 and dm.dataset_layout == "classes"
    assert cli.model.adapter.sample_rate == dm.sample_rate == 16000 and cli.model.num_classes == 12
    steps = cli.model.adapter.waveform_augment
    assert isinstance(steps, ChainAugment) and [type(m) for m in steps.steps] == [TimeShift, SpeedPerturb]
    assert dm.noise_augment is not None and len(dm.noise_augment.noise) == 8  # 8 of the 10 silence clips
    speakers = dm.split_speakers
    assert (len(speakers["train"]), len(speakers["val"]), len(speakers["test"])) == (8, 1, 1)
    metrics = json.loads((tmp_path / "runs" / "speech_truncated_commands" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}


def test_pretrain_then_fine_tune(commands_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two documented commands on generated data: pretrain on Speech Commands resampled to 8 kHz,
    export the backbone, fine-tune the FSDD default from it (frozen for an epoch, a new 10-digit head);
    a model of another width is refused with the mismatching parameters named."""
    from attnmm.lightning.pretrained import backbone_state
    from attnmm.lightning.pretrained import main as export

    monkeypatch.chdir(tmp_path)
    main = recipe_main("speech_truncated")
    short = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1",
             "--trainer.enable_progress_bar=false", f"--data.root={commands_root}"]
    pre = main(["fit", f"--config={CONFIGS / 'speech_truncated_pretrain.yaml'}", "--trainer.max_epochs=1", *short])
    assert pre.datamodule.sample_rate == pre.model.adapter.sample_rate == 8000
    assert pre.model.num_classes == 36 and pre.datamodule.class_names[10:12] == ("zero", "one")
    best = pre.trainer.checkpoint_callback.best_model_path
    export([best, str(tmp_path / "backbone.pt")])
    backbone = backbone_state(tmp_path / "backbone.pt")
    assert backbone and not any(k.startswith("head.") for k in backbone)

    fine = main(["fit", f"--model.init_from={tmp_path / 'backbone.pt'}", "--model.freeze_encoder_epochs=1",
                 "--trainer.max_epochs=2", *short])
    model = fine.model
    (transfer,) = [c for c in fine.trainer.callbacks if isinstance(c, Transfer)]
    assert transfer.loaded and model.num_classes == 10 and model.head.linear.out_features == 10
    assert all(p.requires_grad for p in model.parameters())  # unfrozen after the first epoch
    assert transfer.init_from == str(tmp_path / "backbone.pt")
    metrics = json.loads(next((tmp_path / "runs" / "speech_truncated").glob("version_*/metrics.json")).read_text())
    assert set(metrics) == {"test_acc", "test_loss"}

    with pytest.raises(ValueError, match=r"Hz audio and this model's adapter reads 16000 Hz"):
        main(["fit", "--data", "attnmm.data.SpeechCommandsDataModule", "--trainer.max_epochs=1", *short])  # 16 kHz
    with pytest.raises(ValueError, match=r"adapter\.proj\.weight \(96, 288\) vs \(64, 288\)"):
        main(["fit", f"--model.init_from={best}", "--model.adapter.init_args.d_model=64", "--trainer.max_epochs=1",
              *short])
