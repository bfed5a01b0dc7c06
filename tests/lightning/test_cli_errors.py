"""What a person at a terminal sees when a recipe is given a bad command line or finds no data: one short
message naming the option and what was expected (a "did you mean" for a misspelled option), exit code 1
(a refused value, missing data) or 2 (a command line that does not parse), no traceback unless
``ATTNMM_DEBUG=1``, no Lightning warning, and a help that names the recipe and its configs in plain text.
Every case fails before any data is read or any training starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _recipes import RECIPES, SMOKE, generated_root, real_root, recipe_main

from attnmm.lightning.cli import _quiet_noise

RECIPE_NAMES = sorted(p.stem for p in RECIPES.glob("*.py"))
#: the recipes whose model is built only after their data is read (a vocabulary): slow on the real data
READ_FIRST = ("text_lm", "text_pos")
RECIPE_PARAMS = [pytest.param(r, marks=pytest.mark.slow) if r in READ_FIRST else r for r in RECIPE_NAMES]
BAD_LEFT = ["fit", "--model.adapter.init_args.mask.init_args.left", "-3"]
WARNING = "LightningCLI's args parameter"


def _run(recipe: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python recipes/<recipe>.py <args>`` as a person types it, from ``cwd``."""
    environ = {k: v for k, v in os.environ.items() if k != "ATTNMM_DEBUG"}
    environ.update(MPLBACKEND="Agg", ATTNMM_CACHE=str(cwd / "cache"), **env)
    return subprocess.run(
        [sys.executable, str(RECIPES / f"{recipe}.py"), *args],
        cwd=cwd, env=environ, capture_output=True, text=True, timeout=300,
    )


def _shown(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return (proc.stdout + proc.stderr).splitlines()


@pytest.mark.slow  # a new interpreter; in the quick loop: the in-process tests below
def test_a_refused_value_is_one_short_message(tmp_path: Path) -> None:
    """Before: 126 lines, 3 chained tracebacks, the reason in the middle and a Namespace dump last."""
    proc = _run("speech_truncated", BAD_LEFT, tmp_path)
    lines = _shown(proc)
    assert proc.returncode == 1, lines
    assert "error: --model.adapter.init_args.mask.init_args.left: left must be an int >= 0, got -3" in lines
    assert lines[-1] == "(ATTNMM_DEBUG=1 shows the traceback)"
    assert len(lines) <= 4, lines  # "Seed set to 0", the error, the hint
    assert not any("Traceback" in line or WARNING in line for line in lines), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_attnmm_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = _run("speech_truncated", BAD_LEFT, tmp_path, ATTNMM_DEBUG="1")
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert "left must be an int >= 0, got -3" in proc.stderr


@pytest.mark.slow  # a new interpreter; in the quick loop: the in-process tests below
def test_a_misspelled_option_gets_did_you_mean(tmp_path: Path) -> None:
    """Before: 79 lines of usage, then a nested Union error."""
    proc = _run("speech_truncated", ["fit", "--model.lrr", "0.1"], tmp_path)
    assert proc.returncode == 2
    assert _shown(proc) == [
        "error: --model.lrr is not an option of ClassificationTask (did you mean --model.lr?)",
        "(speech_truncated.py fit --help lists the options)",
    ]


@pytest.mark.slow
def test_missing_data_says_where_to_put_it(tmp_path: Path) -> None:
    """Before: 93 lines, 3 tracebacks, after a download attempt, and an empty fsdd/ folder left behind."""
    data = tmp_path / "data"
    data.mkdir()
    args = ["fit", "--trainer.fast_dev_run=true", "--data.download=false"]
    proc = _run("speech_truncated", args, tmp_path, ATTNMM_DATA=str(data))
    errors = [line for line in _shown(proc) if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, _shown(proc)
    assert f"{data}/fsdd/recordings" in errors[0] and "ATTNMM_DATA" in errors[0]
    assert f"$ATTNMM_DATA ({data})" in proc.stderr and "python -m attnmm" in proc.stderr
    assert len(_shown(proc)) <= 10 and "Traceback" not in proc.stderr
    assert list(data.iterdir()) == [] and not (tmp_path / "runs").exists()


#: a ``sitecustomize`` that turns the network off in the Python process that finds it on its path
OFFLINE = """import socket


def _refuse(*args, **kwargs):
    raise OSError("the network is off in the tests")


socket.getaddrinfo = _refuse
socket.socket.connect = _refuse
"""


@pytest.mark.slow
def test_a_failed_download_says_where_to_put_the_data(tmp_path: Path) -> None:
    """Before: a failed Planetoid download (no network) was reported as a corrupt raw file
    (``RuntimeError: Planetoid raw file .../ind.cora.x is corrupt or truncated``) and left the empty
    folders planetoid/Cora/raw behind."""
    site, data = tmp_path / "offline", tmp_path / "data"
    site.mkdir()
    data.mkdir()
    (site / "sitecustomize.py").write_text(OFFLINE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    args = ["fit", "--trainer.fast_dev_run=true", "--data.download=true"]
    proc = _run("graph_node", args, tmp_path, ATTNMM_DATA=str(data), PYTHONPATH=path)
    lines = _shown(proc)
    errors = [line for line in lines if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, lines
    assert errors[0].startswith("error: downloading Planetoid Cora failed")
    assert f"into {data}/planetoid/Cora/raw yourself" in errors[0] and "$ATTNMM_DATA" in errors[0]
    assert f"$ATTNMM_DATA ({data})" in proc.stderr
    assert len(lines) <= 5 and "Traceback" not in proc.stderr and "Warning" not in proc.stderr, lines
    assert list(data.iterdir()) == [] and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_help_names_the_recipe_and_its_configs_in_plain_text(tmp_path: Path) -> None:
    proc = _run("graph_graph", ["fit", "--help"], tmp_path)
    assert proc.returncode == 0
    text = proc.stdout
    assert "graph_graph.py: Graph classification with a GPS graph transformer" in text
    # the header on the first screen: a one-line usage before it (it was 70 lines of every option)
    usage, _, header = text.splitlines()[:3]
    assert usage == "usage: graph_graph.py [options] fit [options]", usage
    assert header.startswith("graph_graph.py: Graph classification"), header
    assert "default config: " in text and "graph_graph_tu.yaml" in text
    for raw in (":math:`", ":obj:`", ":class:`", ":func:`", ":meth:`", "``"):
        assert raw not in text, raw
    assert WARNING not in proc.stdout + proc.stderr
    assert "Tip:" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_smoke_run_shows_no_tips_and_no_library_warnings(tmp_path: Path) -> None:
    """Before: every run printed Lightning's tip to install litlogger, and a graph recipe's fit two
    FutureWarnings from inside the libraries (PyG's use of torch.jit.script, Lightning's of LeafSpec)."""
    args = ["fit", "--trainer.fast_dev_run=true", "--data.num_graphs=40", "--data.batch_size=8"]
    proc = _run("graph_graph", args, tmp_path)
    lines = _shown(proc)
    assert proc.returncode == 0, lines
    noise = ("Tip:", "litmodels", "litlogger", "Warning", "warn(", "is deprecated")
    assert not [line for line in lines if any(word in line for word in noise)], lines


def test_lightnings_promotional_tips_are_dropped_and_nothing_else(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Lightning advertises litlogger when a trainer is built and litmodels when it adds its own checkpoint
    callback; a recipe shows neither, and Lightning's other messages still show."""
    from lightning import Trainer
    from lightning.pytorch.utilities.rank_zero import rank_zero_info

    _quiet_noise()  # as every RecipeCLI does
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer._callback_connector._maybe_show_litmodels_tip()  # (Lightning shows it once it knows the loggers)
    rank_zero_info("a message of Lightning's own")
    text = "".join(capfd.readouterr()) + caplog.text  # (at a terminal: stderr; under pytest: its log capture)
    assert "Tip:" not in text and "litmodels" not in text and "litlogger" not in text, text
    assert "a message of Lightning's own" in text


def _command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recipe: str, *args: str) -> None:
    """Run ``recipe`` in this process as from the command line (``sys.argv``), from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNMM_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [str(RECIPES / f"{recipe}.py"), *args])
    recipe_main(recipe)()


@pytest.mark.parametrize("recipe", RECIPE_NAMES)
def test_every_recipe_suggests_the_option_meant(
    recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, recipe, "fit", "--model.lrr", "0.1")
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 2, err
    assert err[0].startswith("error: --model.lrr is not an option") and err[0].endswith("(did you mean --model.lr?)")


@pytest.mark.parametrize("recipe", RECIPE_PARAMS)
def test_every_recipe_names_the_refused_option(
    recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = SMOKE.get(recipe, (None, []))[0]  # a recipe whose model is built from its data: generated files
    root = [f"--data.root={generated_root(folder)}"] if folder is not None and real_root(folder) is None else []
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, recipe, "fit", *root, "--model.warmup_fraction=1.5")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert stop.value.code == 1
    assert err == ["error: --model.warmup_fraction: warmup_fraction must be in [0, 1), got 1.5"]


def test_an_unknown_command_gets_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, "text_lm", "fitt")
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: 'fitt' is not a command (did you mean fit?); the commands: fit, validate, test, predict"
    ]


def test_a_bad_type_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, "speech_truncated", "fit", "--model.lr", "abc")
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == "error: --model.lr: Expected a float. Got value: abc"


#: recipe -> the arguments that make it look for data that is not there (and download none)
MISSING = {
    "graph_graph": ["--data.name=PROTEINS"],
    "graph_node": [],
    "image_patches": [],
    "multimodal_digits": ["--data.download=false"],
    "speech_truncated": ["--data.download=false"],
    "text_lm": [],
    "text_pos": [],
}


def test_every_recipe_has_a_missing_data_case() -> None:
    assert sorted(MISSING) == RECIPE_NAMES


@pytest.mark.parametrize("recipe", RECIPE_PARAMS)
def test_every_recipe_without_its_data_says_where_to_put_it(
    recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("ATTNMM_DATA", str(data))
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, recipe, "fit", "--trainer.fast_dev_run=true", *MISSING[recipe])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert stop.value.code == 1 and len(errors) == 1, err
    assert str(data) in errors[0]
    assert f"$ATTNMM_DATA ({data})" in err  # which variable points there, and where it points
    assert list(data.iterdir()) == []  # no empty folder left behind


def test_a_missing_config_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        _command_line(monkeypatch, tmp_path, "text_lm", "fit", "--config", "nope.yaml")
    assert stop.value.code == 2
    missing = tmp_path / "nope.yaml"
    assert capsys.readouterr().err.splitlines()[0] == f"error: --config: File does not exist: '{missing}'"


@pytest.mark.slow  # a new interpreter
def test_a_config_file_with_the_tasks_former_ensemble_option_says_where_it_went(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text("model:\n  ensemble:\n    class_path: attnmm.nn.Ensemble\n")
    proc = _run("speech_truncated", ["fit", "--config=old.yaml"], tmp_path)
    lines = _shown(proc)
    assert proc.returncode == 2, lines
    assert "(an ensemble is a key of its own now: ensemble: N at a config's top level, or --ensemble N)" in lines
