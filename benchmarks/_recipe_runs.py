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
    args = [*args, f"--trainer.max_epochs={epochs}"] if epochs else args
    (result,) = run_fits_side_by_side([(recipe, args)], seed, collect, pin=False)
    return result


def run_fits_side_by_side(
    jobs: list[tuple[str, list[str]]],
    seed: int,
    collect: Callable[[Path], dict[str, float]] | None = None,
    pin: bool = True,
) -> list[dict[str, float]]:
    """Several ``fit`` runs (recipe, extra arguments) at the same time, each in its own temporary
    directory and, with ``pin``, on its own CPU core (``taskset``, one PyTorch thread), so that they
    share the machine's conditions; results as in :func:`run_fit`, in the order of ``jobs``."""
    if pin and len(jobs) > (os.cpu_count() or 1):
        raise ValueError(f"{len(jobs)} pinned runs need as many cores, this machine has {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        started = []
        for n, (recipe, args) in enumerate(jobs):
            cwd = Path(tmp) / str(n)
            cwd.mkdir()
            cmd = [sys.executable, str(RECIPES / f"{recipe}.py"), "fit", f"--seed_everything={seed}"]
            cmd += ["--trainer.enable_progress_bar=false", *args]
            env = dict(os.environ)
            if pin:
                cmd = ["taskset", "-c", str(n), *cmd]
                env["OMP_NUM_THREADS"] = "1"
            sink = (cwd / "log.txt").open("w")
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
            started.append((cmd, cwd, sink, proc, time.perf_counter()))
        results = []
        for cmd, cwd, sink, proc, start in started:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage
            seconds = time.perf_counter() - start
            sink.close()
            if os.waitstatus_to_exitcode(status):
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{(cwd / 'log.txt').read_text()[-4000:]}")
            (metrics_file,) = (cwd / "runs").glob("**/metrics.json")
            run_dir = metrics_file.parent
            run_dir = run_dir.parent if run_dir.name.startswith("version_") else run_dir
            result = {**json.loads(metrics_file.read_text()), **(collect(run_dir) if collect else {})}
            results.append({**result, "seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024})  # Linux: KiB
    return results
