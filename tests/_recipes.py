"""Helpers for running the recipes as a user would: ``python recipes/<name>.py ...``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def data_root(name: str) -> Path:
    """``$ATTNMM_DATA/name``, or skip the test when the real data is not there."""
    root = os.environ.get("ATTNMM_DATA")
    if not root or not (Path(root) / name).is_dir():
        pytest.skip(f"needs the real {name} data under $ATTNMM_DATA (set ATTNMM_DATA=../shared/data)")
    return Path(root)


def run_recipe(name: str, args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run ``recipes/<name>.py`` in a subprocess from ``cwd``; fail with its output on error."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, str(RECIPES / f"{name}.py"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(f"recipe {name} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc
