"""The MNIST recipe with a Grid mask, full attention and a CNN: accuracy, parameters, time, memory.

Runs ``recipes/image_patches.py fit`` once per variant, each in a fresh process (so peak RSS is that
run's own), and prints a Markdown table. The data comes from ``$ATTNMM_DATA/MNIST``. The three
variants share the adapter (4 x 4 patches, 2-D sinusoidal positions), the block layout, the head
and the schedule; only the token mixing differs.

    python -m benchmarks.image_masks                 # default config (12 epochs) per variant
    python -m benchmarks.image_masks --epochs 2      # quick look
    python -m benchmarks.image_masks --cases full,cnn
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

import torch

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "image_patches.py"
CONFIGS = RECIPE.parent / "configs"

CASES: dict[str, tuple[str, list[str]]] = {
    "grid": ("Grid(7, 7, kernel=3) attention", []),
    "full": ("Full attention", [f"--config={CONFIGS / 'image_patches_full.yaml'}"]),
    "cnn": ("CNN (3 x 3 convolutions)", [f"--config={CONFIGS / 'image_patches_cnn.yaml'}"]),
}


def run_case(args: list[str], epochs: int | None, seed: int) -> dict[str, float]:
    """One recipe run in a temporary directory: test metrics, parameters, wall time and peak RSS."""
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
        (metrics_file,) = Path(tmp).glob("runs/image_patches/**/metrics.json")
        metrics = json.loads(metrics_file.read_text())
        (ckpt,) = Path(tmp).glob("runs/image_patches/**/last.ckpt")
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
        params = sum(v.numel() for v in state.values() if v.is_floating_point())
    return {**metrics, "params": params, "seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", default="grid,full,cnn", help="comma-separated subset of grid, full, cnn")
    opts = parser.parse_args()
    rows = []
    for key in opts.cases.split(","):
        if key not in CASES:
            parser.error(f"unknown case {key!r}; choose from {', '.join(CASES)}")
        name, args = CASES[key]
        print(f"running {name} ...", flush=True)
        r = run_case(args, opts.epochs, opts.seed)
        rows.append(
            f"| {name} | {100 * r['test_acc']:.2f} | {r['test_loss']:.3f} | {r['params'] / 1e3:.1f} K | "
            f"{r['seconds'] / 60:.1f} | {r['peak_rss_mb']:.0f} |"
        )
        print(rows[-1], flush=True)
    print("\n| token mixing | test acc (%) | test loss | parameters | wall time (min) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
