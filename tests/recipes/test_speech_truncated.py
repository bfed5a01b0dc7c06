"""recipes/speech_truncated.py on the real FSDD data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _recipes import data_root, run_recipe

pytestmark = pytest.mark.data


def test_fast_dev_run(tmp_path: Path) -> None:
    data_root("fsdd")
    proc = run_recipe("speech_truncated", ["fit", "--trainer.fast_dev_run=true"], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "speech_truncated" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
    assert 0.0 <= metrics["test_acc"] <= 1.0
    assert "metrics written to" in proc.stdout


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
