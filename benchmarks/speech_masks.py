"""The speech recipe with Full, Window and Chunk masks: accuracy, training time and peak memory.

Runs ``recipes/speech_truncated.py fit`` once per mask, each in a fresh process (so peak RSS is that
run's own), and prints a Markdown table. The data comes from ``$ATTNMM_DATA/fsdd``.

    python -m benchmarks.speech_masks                 # default config (30 epochs) per mask
    python -m benchmarks.speech_masks --epochs 2      # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "speech_truncated.py"
MASK = "--model.adapter.init_args.mask"

CASES: dict[str, list[str]] = {
    "Full": [f"{MASK}=null"],
    "Window(16, 4)": [f"{MASK}=attnmm.masks.Window", f"{MASK}.init_args.left=16", f"{MASK}.init_args.right=4"],
    "Chunk(8, 2)": [f"{MASK}=attnmm.masks.Chunk", f"{MASK}.init_args.size=8", f"{MASK}.init_args.left_chunks=2"],
}


def run_case(args: list[str], epochs: int | None, seed: int) -> dict[str, float]:
    """One recipe run in a temporary directory: its test metrics, wall time and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(RECIPE), "fit", f"--seed_everything={seed}", "--trainer.enable_progress_bar=false"]
        cmd += args + ([f"--trainer.max_epochs={epochs}"] if epochs else [])
        log = Path(tmp) / "log.txt"
        start = time.perf_counter()
        with log.open("w") as sink:
            proc = subprocess.Popen(cmd, cwd=tmp, stdout=sink, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{log.read_text()[-4000:]}")
        (metrics_file,) = Path(tmp).glob("runs/speech_truncated/**/metrics.json")
        metrics = json.loads(metrics_file.read_text())
    return {**metrics, "seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    rows = []
    for name, args in CASES.items():
        print(f"running {name} ...", flush=True)
        r = run_case(args, opts.epochs, opts.seed)
        rows.append(
            f"| {name} | {100 * r['test_acc']:.1f} | {r['test_loss']:.3f} | {r['seconds'] / 60:.1f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )
        print(rows[-1], flush=True)
    print("\n| mask | test acc (%) | test loss | wall time (min) | peak RSS (MB) |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
