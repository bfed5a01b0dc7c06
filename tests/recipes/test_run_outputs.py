"""What a run leaves: every run, a smoke run (``fast_dev_run``) included, in its own ``version_N`` folder
holding its checkpoints, ``metrics.json`` and one attention map per encoder layer as PNG; and a progress
bar by default in every recipe and config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from _recipes import CONFIG_PATHS, RECIPES, config_path, recipe_main, run_recipe, smoke_args

SMOKE = ["--trainer.fast_dev_run=true", "--torch_threads=1", "--trainer.enable_model_summary=false"]


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _no_noise(proc: subprocess.CompletedProcess[str]) -> None:
    """No tip of Lightning's advertising its cloud services (litlogger, litmodels) is shown. ``run_recipe``
    sets ``PYTHONWARNINGS=ignore``, so the warning words cannot show here: the libraries' deprecation
    warnings are checked in a fresh interpreter by tests/lightning/test_cli_errors.py."""
    shown = (proc.stdout + proc.stderr).splitlines()
    noise = ("Tip:", "litmodels", "litlogger", "FutureWarning", "is deprecated")
    assert not [line for line in shown if any(word in line for word in noise)], shown


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_run_has_its_own_folder_with_its_attention_maps(tmp_path: Path) -> None:
    """Once: a smoke run wrote runs/<recipe>/checkpoints/last.ckpt (then last-v1.ckpt) and overwrote an
    unversioned metrics.json; attention maps went to TensorBoard only."""
    extra = smoke_args("speech_truncated")
    for _ in range(2):
        proc = run_recipe("speech_truncated", ["fit", *SMOKE, *extra], tmp_path)
        _no_noise(proc)
    run = tmp_path / "runs" / "speech_truncated"
    assert sorted(p.name for p in run.iterdir()) == ["version_0", "version_1"]
    assert {p.name for p in tmp_path.iterdir()} <= {"runs", "cache"}  # nothing outside (no lightning_logs/)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["speech_truncated"]
    ckpt = torch.load(run / "version_0" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    layers = ckpt["hyper_parameters"]["encoder"]["init_args"]["num_layers"]
    pictures = [f"attention_layer{i}.png" for i in range(layers)]
    for version in ("version_0", "version_1"):
        assert _files(run / version) == [*pictures, "checkpoints/last.ckpt", "metrics.json"]
        assert all(_is_png(run / version / name) for name in pictures)
        assert set(json.loads((run / version / "metrics.json").read_text())) == {"test_acc", "test_loss"}
    assert "attention maps written to" in proc.stdout
    assert any(line.startswith("Epoch 0/0") for line in proc.stdout.splitlines()), proc.stdout  # a progress bar
    # `test` writes its metrics and maps into a folder of its own too, and no checkpoint
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    proc = run_recipe("speech_truncated", ["test", f"--ckpt_path={last}", *SMOKE, *extra], tmp_path)
    _no_noise(proc)
    assert _files(run / "version_2") == [*pictures, "metrics.json"]


# graph_graph's GPS layers draw their maps too: tests/recipes/test_smoke.py::test_fast_dev_run (the same run)


def test_an_encoder_without_weights_gets_no_pictures(tmp_path: Path) -> None:
    lstm = f"--config={config_path('speech_truncated_lstm.yaml')}"
    proc = run_recipe("speech_truncated", ["fit", lstm, *SMOKE, *smoke_args("speech_truncated")], tmp_path)
    run = tmp_path / "runs" / "speech_truncated_lstm" / "version_0"
    assert _files(run) == ["checkpoints/last.ckpt", "metrics.json"]
    assert "no attention maps:" in proc.stdout and "does not return attention weights" in proc.stdout


#: every recipe with its default config, and the graph configs that once switched the progress bar off
PROGRESS = [
    *((r, None) for r in ("graph_graph", "graph_node", "image_patches", "speech_truncated", "text_lm", "text_pos")),
    ("graph_graph", "graph_graph_tu.yaml"),
    ("graph_node", "graph_node_gat.yaml"),
]


@pytest.mark.parametrize(("recipe", "config"), PROGRESS)
def test_progress_bar_is_on_by_default(
    recipe: str, config: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = [] if config is None else [f"--config={RECIPES / 'configs' / config}"]
    if config == "graph_graph_tu.yaml":
        from _recipes import config_smoke_args

        args += config_smoke_args(recipe, "graph_graph_tu")
    else:
        args += smoke_args(recipe)
    cli = recipe_main(recipe)(args, run=False)
    assert cli.trainer.progress_bar_callback is not None


def test_no_config_switches_the_progress_bar_off() -> None:
    for path in CONFIG_PATHS.values():
        assert "enable_progress_bar: false" not in path.read_text(), path.name
