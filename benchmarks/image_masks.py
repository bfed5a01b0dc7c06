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
from pathlib import Path

import torch

from benchmarks._recipe_runs import RECIPES, run_fit

CONFIGS = RECIPES.parent / "studies" / "recipe_runs" / "configs"  # the full-attention and CNN variants

CASES: dict[str, tuple[str, list[str]]] = {
    "grid": ("Grid(7, 7, kernel=3) attention", []),
    "full": ("Full attention", [f"--config={CONFIGS / 'image_patches_full.yaml'}"]),
    "cnn": ("CNN (3 x 3 convolutions)", [f"--config={CONFIGS / 'image_patches_cnn.yaml'}"]),
}


def count_parameters(run_dir: Path) -> dict[str, float]:
    """Parameters of the trained model, from its last checkpoint."""
    (ckpt,) = run_dir.glob("**/last.ckpt")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    return {"params": sum(v.numel() for v in state.values() if v.is_floating_point())}


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
        r = run_fit("image_patches", args, opts.epochs, opts.seed, count_parameters)
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
