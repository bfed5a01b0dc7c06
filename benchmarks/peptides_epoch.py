"""Training-step time of the Peptides-func recipe, this checkout against another, in alternating processes.

Each measurement is a fresh process that imports ``attnmm`` and the recipe from one checkout, builds the
recipe's model and data exactly as ``recipes/graph_graph.py fit --config
recipes/configs/graph_graph_peptides.yaml`` does (same seed), and runs Lightning's ``fit`` on the first
``--batches`` training batches (no validation): each batch's time from ``on_train_batch_start`` to
``on_train_batch_end`` is forward, backward and the optimiser step (with the recipe's logging and
metrics), and the gap before it is the loading of the batch. The first ``--warmup`` batches are not
counted. The checkouts take turns, round after round, so that a load on the machine that changes
over time falls on both; what counts is the ratio of their medians.

    python benchmarks/peptides_epoch.py --baseline /path/to/other/checkout
    python benchmarks/peptides_epoch.py --baseline ../base --rounds 5 --batches 30 --threads 1 2

Printed per thread count: each checkout's median time a batch over the rounds (wall clock and the
process's CPU time), the spread (lowest and highest round), the loading time, and the ratio
baseline / candidate of the medians and of each round's pair.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _child(checkout: Path, threads: int, batches: int, warmup: int) -> dict[str, float]:
    """One measurement in this process, with ``attnmm`` and the recipe of ``checkout``."""
    import time

    import torch
    from lightning.pytorch.callbacks import Callback

    torch.set_num_threads(threads)
    sys.path.insert(0, str(checkout / "recipes"))
    import graph_graph  # the checkout's recipe

    class Timer(Callback):
        def __init__(self) -> None:
            self.wall: list[float] = []
            self.cpu: list[float] = []
            self.load: list[float] = []
            self._end: float | None = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
            now = time.perf_counter()
            if self._end is not None:
                self.load.append(now - self._end)
            self._start, self._cpu = now, time.process_time()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
            self._end = time.perf_counter()
            self.wall.append(self._end - self._start)
            self.cpu.append(time.process_time() - self._cpu)

    with tempfile.TemporaryDirectory() as run_dir:
        args = [
            "--config", str(checkout / "recipes" / "configs" / "graph_graph_peptides.yaml"),
            "--torch_threads", str(threads),
            "--trainer.max_epochs=1", f"--trainer.limit_train_batches={batches + warmup}",
            "--trainer.limit_val_batches=0", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", f"--trainer.default_root_dir={run_dir}",
        ]
        cli = graph_graph.main(args, run=False)
        timer = Timer()
        cli.trainer.callbacks.append(timer)
        cli.trainer.fit(cli.model, cli.datamodule)
    return {
        "wall": statistics.median(timer.wall[warmup:]),
        "cpu": statistics.median(timer.cpu[warmup:]),
        "load": statistics.median(timer.load[warmup:]) if timer.load[warmup:] else 0.0,
        "params": sum(p.numel() for p in cli.model.parameters()),
    }


def _run(checkout: Path, threads: int, batches: int, warmup: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads), "MPLBACKEND": "Agg"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(checkout), "--threads", str(threads),
           "--batches", str(batches), "--warmup", str(warmup)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(checkout))
    if done.returncode != 0:
        raise RuntimeError(f"the measurement in {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s (rounds {min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout (its root: attnmm/ and recipes/)")
    parser.add_argument("--candidate", type=Path, default=HERE, help="the checkout measured against it "
                        "(default: the one holding this script)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30, help="batches timed per process")
    parser.add_argument("--warmup", type=int, default=3, help="batches run first and not timed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child.resolve(), args.threads[0], args.batches, args.warmup)))
        return
    if args.baseline is None:
        parser.error("--baseline is required")
    checkouts = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    print(f"baseline {checkouts['baseline']}, candidate {checkouts['candidate']}; {args.batches} batches of the "
          f"Peptides-func recipe per process after {args.warmup} untimed, {args.rounds} alternating rounds")
    for threads in args.threads:
        got: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
        for r in range(args.rounds):
            order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))  # each goes first in turn
            for name in order:
                got[name].append(_run(checkouts[name], threads, args.batches, args.warmup))
            line = ", ".join(f"{n} {got[n][-1]['wall']:.3f} s wall / {got[n][-1]['cpu']:.3f} s cpu" for n in checkouts)
            print(f"  threads={threads} round {r + 1}: {line}", flush=True)
        print(f"threads={threads} (time a batch: forward, backward, optimiser step)")
        for name in checkouts:
            rows = got[name]
            print(f"  {name:9s} wall {_summary([m['wall'] for m in rows])}, cpu {_summary([m['cpu'] for m in rows])}, "
                  f"loading {statistics.median(m['load'] for m in rows) * 1e3:.1f} ms, "
                  f"{int(rows[0]['params']):,} parameters")
        for key in ("wall", "cpu"):
            base = [m[key] for m in got["baseline"]]
            cand = [m[key] for m in got["candidate"]]
            paired = [b / c for b, c in zip(base, cand)]
            ratio = statistics.median(base) / statistics.median(cand)
            spread = f"{min(paired):.2f}-{max(paired):.2f}x"
            print(f"  ratio baseline/candidate ({key}): medians {ratio:.2f}x, per round {spread}")


if __name__ == "__main__":
    main()
