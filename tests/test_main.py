"""``python -m attnmm`` and the ``attnmm`` command: the recipes with their configs and one-line
descriptions, where data is looked for, and which datasets are there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnmm
from attnmm import __main__ as cli_main
from attnmm import _recipes

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a new interpreter; in the quick loop: cli_main.main in-process, below
def test_python_m_attnmm_lists_recipes_configs_and_data(tmp_path: Path) -> None:
    """Before: "attnmm is a package and cannot be directly executed"."""
    data = tmp_path / "data"
    (data / "fsdd" / "recordings").mkdir(parents=True)
    (data / "MNIST").mkdir()  # an empty folder is not a dataset
    env = {**os.environ, "ATTNMM_DATA": str(data), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "attnmm"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for script in (ROOT / "recipes").glob("*.py"):
        assert f"  {script.stem} " in out and _recipes.summary(script) in out
    assert "speech_truncated_strings.yaml" in out and "graph_graph_tu.yaml" in out
    assert f"Data folder: {data.resolve()} ($ATTNMM_DATA = {data})" in out
    present, absent = out.split("  present:")[1].split("  absent:")
    assert "fsdd" in present and "MNIST" not in present and "MNIST" in absent
    assert "Traceback" not in proc.stderr


def test_variants_belong_to_the_longest_recipe_name(tmp_path: Path) -> None:
    folder = tmp_path / "recipes"
    (folder / "configs").mkdir(parents=True)
    for name in ("digits", "digits_robust"):
        (folder / f"{name}.py").write_text(f'"""The {name} recipe."""\n')
    for name in ("digits", "digits_late", "digits_robust", "digits_robust_gate"):
        (folder / "configs" / f"{name}.yaml").write_text(f"# {name}\n")
    plain = [p.stem for p in _recipes.recipe_configs(folder, "digits")]
    robust = [p.stem for p in _recipes.recipe_configs(folder, "digits_robust")]
    assert plain == ["digits", "digits_late"]
    assert robust == ["digits_robust", "digits_robust_gate"]


def test_an_installed_package_says_where_the_recipes_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(cli_main, "recipes_dir", lambda: None)
    monkeypatch.delenv("ATTNMM_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli_main.main([]) == 0
    out = capsys.readouterr().out
    assert "Recipes: none beside this installed package; they are in the recipes/ folder" in out
    assert "$ATTNMM_DATA is not set: the default, ~/.cache/attnmm" in out
    assert "  present: none" in out


def test_the_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.scripts]\n' in text and 'attnmm = "attnmm.__main__:main"' in text
    assert callable(attnmm.__main__.main)
