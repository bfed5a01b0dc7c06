"""Run a recipe's ``fit`` in a fresh process and collect its test metrics, wall time and peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def run_fit(
    recipe: str,
    args: list[str],
    epochs: int | None,
    seed: int,
    collect: Callable[[Path], dict[str, float]] | None = None,
) -> dict[str, float]:
    """``python recipes/<recipe>.py fit`` in a temporary directory.

    Returns the run's ``metrics.json`` plus ``seconds`` (wall time) and ``peak_rss_mb`` (this child's
    own peak resident size), and whatever ``collect(run_dir)`` reads from the run directory before it
    is deleted.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(RECIPES / f"{recipe}.py"), "fit", f"--seed_everything={seed}"]
        cmd += ["--trainer.enable_progress_bar=false", *args]
        cmd += [f"--trainer.max_epochs={epochs}"] if epochs else []
        log = Path(tmp) / "log.txt"
        start = time.perf_counter()
        with log.open("w") as sink:
            proc = subprocess.Popen(cmd, cwd=tmp, stdout=sink, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{log.read_text()[-4000:]}")
        run_dir = Path(tmp) / "runs" / recipe
        (metrics_file,) = run_dir.glob("**/metrics.json")
        result = {**json.loads(metrics_file.read_text()), **(collect(run_dir) if collect else {})}
    return {**result, "seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}  # Linux: KiB
