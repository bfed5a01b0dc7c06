from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recipes import RECIPES, recipe_main, write_speech_commands

from benchmarks import kws


def test_evaluate_stores_the_confusion_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_speech_commands(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    config = [f"--config={RECIPES / 'configs' / 'speech_truncated_commands.yaml'}", f"--data.root={tmp_path / 'data'}"]
    cli = recipe_main("speech_truncated")(
        ["fit", *config, "--trainer.max_epochs=1", "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1",
         "--trainer.enable_progress_bar=false"]
    )
    best = cli.trainer.checkpoint_callback.best_model_path
    result = kws.evaluate(best, config)
    recipe_acc = json.loads(next(tmp_path.glob("runs/*/version_0/metrics.json")).read_text())["test_acc"]
    assert result["clips"] == sum(map(sum, result["confusion"])) == 36  # 1 test speaker x 35 words + 1 silence
    assert result["test_acc"] == pytest.approx(recipe_acc, abs=1e-6)  # the recipe's own test accuracy
    assert result["classes"][-2:] == ["_unknown_", "_silence_"] and result["test_speakers"] == 1
    assert set(result["per_class"]) == set(result["classes"])
    monkeypatch.setattr(kws, "RESULTS", tmp_path)
    kws.main(["--name", "tiny", "--ckpt", best, "--", *config])
    stored = kws.load_stores(("tiny", "absent"))
    assert list(stored) == ["tiny"] and stored["tiny"]["confusion"] == result["confusion"]
    fig = kws.figure(stored)
    assert len(fig.axes) == 1 and "unseen speakers" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="no stored keyword-spotting results"):
        kws.figure({})
