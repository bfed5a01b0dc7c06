"""The speech recipe with Full, Window and Chunk masks: accuracy, training time and peak memory.

Runs ``recipes/speech_truncated.py fit`` once per mask, each in a fresh process (so peak RSS is that
run's own), and prints a Markdown table. The data comes from ``$ATTNMM_DATA/fsdd``.

    python -m benchmarks.speech_masks                 # default config (30 epochs) per mask
    python -m benchmarks.speech_masks --epochs 2      # quick look
"""

from __future__ import annotations

import argparse

from benchmarks._recipe_runs import run_fit

MASK = "--model.adapter.init_args.mask"

CASES: dict[str, list[str]] = {
    "Full": [f"{MASK}=null"],
    "Window(16, 4)": [f"{MASK}=attnmm.masks.Window", f"{MASK}.init_args.left=16", f"{MASK}.init_args.right=4"],
    "Chunk(8, 2)": [f"{MASK}=attnmm.masks.Chunk", f"{MASK}.init_args.size=8", f"{MASK}.init_args.left_chunks=2"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    rows = []
    for name, args in CASES.items():
        print(f"running {name} ...", flush=True)
        r = run_fit("speech_truncated", args, opts.epochs, opts.seed)
        rows.append(
            f"| {name} | {100 * r['test_acc']:.1f} | {r['test_loss']:.3f} | {r['seconds'] / 60:.1f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )
        print(rows[-1], flush=True)
    print("\n| mask | test acc (%) | test loss | wall time (min) | peak RSS (MB) |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
