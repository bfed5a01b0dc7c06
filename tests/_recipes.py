"""Helpers for running the recipes as a user would: ``python recipes/<name>.py ...``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"

#: Every recipe -> (its data folder under $ATTNMM_DATA, or None for generated data; the arguments
#: that make its smoke run small), for tests that run all of them the same way.
SMOKE = {
    "graph_graph": (None, ["--data.num_graphs=40", "--data.batch_size=8"]),
    "graph_node": ("planetoid", []),
    "speech_truncated": ("fsdd", []),
    "image_patches": ("MNIST", []),
    "text_pos": ("ud_english_ewt", []),
    "text_lm": ("tinyshakespeare", ["--data.block_size=64", "--data.eval_stride=64"]),
}


def smoke_params(exclude: tuple[str, ...] = ()) -> list[object]:
    """The recipes of :data:`SMOKE` as pytest params, those on real data marked ``data``."""
    return [pytest.param(r, marks=[pytest.mark.data] if SMOKE[r][0] else []) for r in sorted(SMOKE) if r not in exclude]


def smoke_args(recipe: str) -> list[str]:
    """The recipe's small-run arguments, after skipping the test when its data is absent."""
    folder, extra = SMOKE[recipe]
    if folder is not None:
        data_root(folder)
    return list(extra)


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
