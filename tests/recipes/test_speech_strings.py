"""recipes/speech_truncated.py with configs/speech_truncated_strings.yaml: connected digits on the real
FSDD recordings (SequenceTask with a CTC head and an attention decoder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _recipes import RECIPES, data_root, run_recipe

CONFIG = RECIPES / "configs" / "speech_truncated_strings.yaml"


@pytest.mark.data
def test_short_fit_writes_der_and_a_loadable_checkpoint(tmp_path: Path) -> None:
    data_root("fsdd")
    args = [
        "fit", f"--config={CONFIG}", "--trainer.max_steps=3", "--trainer.limit_val_batches=2",
        "--trainer.limit_test_batches=2", "--data.num_train=48", "--data.num_val=32", "--data.num_test=32",
    ]
    proc = run_recipe("speech_truncated", args, tmp_path)
    run_dir = tmp_path / "runs" / "speech_truncated_strings" / "version_0"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics) == {"test_der", "test_loss", "test_string_acc"}
    assert metrics["test_der"] >= 0.0 and 0.0 <= metrics["test_string_acc"] <= 1.0
    assert "metrics written to" in proc.stdout
    from attnmm.adapters import SpeechAdapter
    from attnmm.lightning import SequenceTask
    from attnmm.masks import Chunk

    task = SequenceTask.load_from_checkpoint(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert isinstance(task.adapter.mask, Chunk) and task.decoder is not None and task.decoding == "rescore"
    logits = task.eval()(SpeechAdapter.example_batch(2))
    assert logits.shape[-1] == 11 and torch.isfinite(logits).all()


def test_nested_null_on_the_command_line_becomes_json() -> None:
    from attnmm.lightning.cli import _nested_nulls_as_json

    roots = ("model", "data")
    assert _nested_nulls_as_json(["fit", "--model.adapter.init_args.mask=null"], roots) == [
        "fit", '--model.adapter={"init_args": {"mask": null}}'
    ]
    assert _nested_nulls_as_json(["--model.adapter.init_args.mask", "null", "--x=1"], roots) == [
        '--model.adapter={"init_args": {"mask": null}}', "--x=1"
    ]
    untouched = ["--data.test_speakers=null", "--trainer.logger=null", "--model.lr=1", "--seed_everything", "null"]
    assert _nested_nulls_as_json(untouched, roots) == untouched
    assert _nested_nulls_as_json(["--model.adapter.init_args.mask=null"], ()) == ["--model.adapter.init_args.mask=null"]
