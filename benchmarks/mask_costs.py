"""One training step of the connected-digits recipe's model (forward, hybrid CTC/attention loss, backward, AdamW)
under each mask, on a batch of ``batch`` real test strings of exactly n digits for n in ``cost_lengths``: the
``cost`` part of ``python -m studies speech_strings measure`` (kept in that study's store, shown on
docs/recipes/speech.md). Each (mask, n) runs in a fresh process on one thread (``python -m benchmarks.mask_costs
MASK BATCH STEPS``): the fastest of ``steps`` timed steps after a warm-up (a step other processes disturbed is
taken again, :func:`._measure.alternate_rounds`), scaled to an epoch of the recipe's ``num_train`` strings, and the
step's peak memory above its inputs (:func:`._measure.peak_of`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from benchmarks._measure import alternate, peak_of


def worker(mask: str, batch_file: str, steps: int) -> None:
    """In a fresh process: time ``steps`` training steps on the saved batch and one step's peak; print JSON."""
    from studies.speech_strings.measure import build_task

    torch.set_num_threads(1)
    torch.manual_seed(0)
    task = build_task(mask).train()
    batch = torch.load(batch_file, weights_only=True)
    opt = torch.optim.AdamW(task.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log outside a Trainer
            task._shared_step(batch, "train").backward()
        opt.step()

    step()  # warm-up; AdamW's state now exists
    _, fastest = alternate(None, step, steps, warmup=0)
    print(json.dumps({"frames": int(task.adapter(batch).x.size(1)), "step_s": fastest, "peak_bytes": peak_of(step)}))


def cost(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.data import collate_digit_strings
    from studies.speech_strings.measure import ROOT, test_strings

    steps_per_epoch = math.ceil(opts.num_train / opts.batch)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in opts.cost_lengths:
            strings = test_strings(n, opts.batch, opts.root)
            path = Path(tmp) / f"batch_{n}.pt"
            torch.save(dict(collate_digit_strings([strings[i] for i in range(len(strings))])), path)
            for mask in opts.cost_masks if n % 2 == 0 else opts.cost_masks[::-1]:
                cmd = [sys.executable, "-m", "benchmarks.mask_costs", mask, str(path), str(opts.steps)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
                if proc.returncode:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
                r = json.loads(proc.stdout.splitlines()[-1])
                rows.append({"mask": mask, "digits": n, "batch": opts.batch, **r, "peak_mb": r["peak_bytes"] / 2**20,
                             "epoch_min": r["step_s"] * steps_per_epoch / 60})
    return {"rows": rows, "steps_per_epoch": steps_per_epoch, "steps": opts.steps, "load_avg": os.getloadavg()[1]}


def figure(detail: dict[str, Any]) -> dict[str, Any]:
    """Step time and peak memory against string length, per mask (matplotlib), when measured."""
    from benchmarks.rnn_costs import plot

    if "cost" not in detail:
        return {}
    rows = sorted(detail["cost"]["rows"], key=lambda r: r["digits"])
    curves = [{m: [(r["digits"], r[key]) for r in rows if r["mask"] == m] for m in dict.fromkeys(r["mask"] for r in
                                                                                                 detail["cost"]["rows"])}
              for key in ("step_s", "peak_mb")]
    fig = plot([(curves[0], "digits per string (frames)", "training step (s)"),
                (curves[1], "digits per string (frames)", "peak memory of a step (MB)")])
    lengths = sorted({(r["digits"], r["frames"]) for r in rows if r["mask"] == "Full"})
    for ax in fig.axes:
        ax.set_xticks([n for n, _ in lengths], [f"{n}\n({f})" for n, f in lengths])
        ax.minorticks_off()
    return {"speech_strings_cost": fig}


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]))
