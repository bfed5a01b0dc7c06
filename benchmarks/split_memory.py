"""The first call's memory of a split problem, as a fresh process feels it: ``python -m benchmarks.split_memory``.

The mixed-sequence problem (:mod:`benchmarks.mixed_sequence`: 4,096 audio frames, a 64 x 64 patch grid,
512 text tokens and 16 bottleneck tokens as one ``Segments`` sequence of L = 8,720, H = 4, E = 64, fp32)
is split into its query segments before dispatch. Each measurement is a fresh process (one thread,
glibc's ``MALLOC_MMAP_THRESHOLD_=131072`` so that freed blocks leave the process) that makes one full-size
forward + backward, in two ways: after a warm-up with a small problem of the same kind (the same
modalities and masks at a quarter of the sizes), and with no warm-up at all (only torch's own one-time
import of its first backward with a given gradient, its symbolic-shapes module, which any program pays,
made before the baseline as ``benchmarks._worker`` does). Reported: the peak resident size during that
call above the size before it, the part of it beyond what any method returns (the output and the
gradients of q, k and v: 4 x 8.9 MB), both as a multiple of the dense (L, L) bool mask (76 MB), the
part of the peak that is torch's own library code paged in by kernels the process runs for the first
time (file-backed pages of ``libtorch_cpu.so``, shared and reclaimable: the warm-up pays it in the other
row), and what the process still holds after the call (the gradients and the cache of the mask's forms).

Results go to ``benchmarks/results/split_memory.json``; the table in docs/attention.md (between its
``split_memory`` markers) is rendered from them (``--render-only`` renders it again from the store).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from benchmarks import mixed_sequence
from benchmarks._measure import _status, commit, machine_line, process_peak, train_runner
from benchmarks._page import publish

RESULTS = Path(__file__).with_name("results") / "split_memory.json"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "attention.md"
START, END = "<!-- split_memory:start -->", "<!-- split_memory:end -->"

DENSE = mixed_sequence.LENGTH**2  # bytes of the (L, L) bool mask
RETURNED = 4 * mixed_sequence.HEADS * mixed_sequence.LENGTH * mixed_sequence.DIM * 4  # output, d_q, d_k, d_v


def small_mask() -> Any:
    """The mixed-sequence mask's kind at a quarter of its sizes (the warm-up): 256 audio frames, a
    16 x 16 grid, 64 text tokens and 4 bottleneck tokens, each modality linked to itself and the
    bottleneck, the bottleneck to all."""
    from attnmm.masks import Causal, Grid, Segments, Window

    sizes = [256, 16 * 16, 64, 4]
    links = [[c in (a, 3) for c in range(4)] for a in range(3)] + [[True] * 4]
    return Segments(sizes, within=[Window(32, 32), Grid(16, 16, kernel=7), Causal(), None], links=links)


def _inputs(length: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (1, mixed_sequence.HEADS, length, mixed_sequence.DIM)
    x = {n: torch.randn(shape, generator=g) for n in ("q", "k", "v", "grad")}
    for n in ("q", "k", "v"):
        x[n].requires_grad_(True)
    return x


def child(warm: bool = True) -> dict[str, int]:
    """In this (fresh) process: the small warm-up (or, without ``warm``, torch's one-time first-backward
    import alone), then the first full-size call's peak, the library code it paged in and what stays held."""
    from attnmm import attend

    torch.set_num_threads(1)
    if warm:
        small = small_mask()
        inputs = _inputs(small.offsets[-1], seed=0)
        train_runner(lambda q, k, v: attend(q, k, v, small), inputs)()
        del inputs
    else:  # what any program's first backward with a given gradient imports (sympy), as benchmarks._worker
        torch.ones(1, requires_grad=True).backward(torch.ones(1))
    x = mixed_sequence.build()
    code = _status("RssFile")
    peak, held = process_peak(train_runner(lambda q, k, v: attend(q, k, v, mixed_sequence.MASK), x), calls=1)
    return {"peak": peak, "held": held, "code": max(_status("RssFile") - code, 0)}


def measure(processes: int, warm: bool = True) -> list[dict[str, int]]:
    """:func:`child` in ``processes`` fresh processes, one after another."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "benchmarks.split_memory", "--child"] + ([] if warm else ["--cold"])
    runs = []
    for i in range(processes):
        proc = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        run = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
        runs.append(run)
        print(f"   {'warm' if warm else 'cold'} process {i + 1}: peak {run['peak'] / 1e6:.1f} MB "
              f"(library code {run['code'] / 1e6:.1f} MB), held {run['held'] / 1e6:.1f} MB", flush=True)
    return runs


def summary(runs: list[dict[str, int]]) -> dict[str, float]:
    """Medians over the processes, and the spread of the ratio beyond the returned tensors."""
    beyond = sorted((r["peak"] - RETURNED) / DENSE for r in runs)
    return {
        "peak_mb": statistics.median(r["peak"] for r in runs) / 1e6,
        "held_mb": statistics.median(r["held"] for r in runs) / 1e6,
        "code_mb": statistics.median(r.get("code", 0) for r in runs) / 1e6,
        "peak_x": statistics.median(r["peak"] for r in runs) / DENSE,
        "beyond_x": statistics.median(beyond),
        "beyond_min": beyond[0],
        "beyond_max": beyond[-1],
    }


def markdown(stored: dict[str, Any]) -> str:
    lines = [
        "| first forward + backward, L = 8,720, split before dispatch | peak | x the (L, L) bool mask | beyond "
        "output and gradients (min / median / max) | of the peak, torch's code paged in | held after |",
        "|---|---|---|---|---|---|",
    ]
    for key, title in (("runs", "after a small warm-up of the same kind"), ("cold", "no warm-up")):
        if key not in stored:
            continue
        s = summary(stored[key])
        lines.append(
            f"| {title} | {s['peak_mb']:.1f} MB | {s['peak_x']:.2f} | {s['beyond_min']:.2f} / {s['beyond_x']:.2f} / "
            f"{s['beyond_max']:.2f} x the mask | {s['code_mb']:.1f} MB ({s['code_mb'] * 1e6 / DENSE:.2f} x) | "
            f"{s['held_mb']:.1f} MB |"
        )
    return "\n".join(lines)


def render_page(page: str, stored: dict[str, Any]) -> str:
    """``page`` with its section between the markers replaced by the stored run's table."""
    from benchmarks._page import generated

    footer = (
        f"{len(stored['runs'])} fresh processes per row, one thread, "
        f"{stored['machine']}, code at `{stored['commit']}`. The output and the three gradients alone are "
        f"{RETURNED / 1e6:.1f} MB ({RETURNED / DENSE:.2f} x the mask). With no warm-up, the process has only made "
        "torch's one-time import of its first backward with a given gradient (its symbolic-shapes module, "
        "about 30 MB in any program) before the baseline; the code paged in is the growth of its file-backed "
        f"resident pages over the call (torch's kernels run for the first time in the process).{_peer_line()}"
    )
    return generated(page, START, END, "python -m benchmarks.split_memory", RESULTS, [markdown(stored), "", footer])


def _peer_line() -> str:
    """The dense-mask peer's peak on this problem, from the benchmark page's store (its three first calls)."""
    from benchmarks._page import load, row

    mixed = row(load(), "mixed")
    if not mixed or not mixed.get("m_peer"):
        return ""
    return (f" SDPA handed the dense mask peaks at {mixed['m_peer'] / 1e6:.0f} MB ({mixed['m_peer'] / DENSE:.1f} x "
            "the mask) over its first three calls ([benchmarks](benchmarks.md), the mixed-sequence row).")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render the page's table from the store")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        result = child(warm=not opts.cold)
        print(json.dumps(result))
        return result
    if opts.render_only:
        stored = json.loads(RESULTS.read_text())
    else:
        stored = {"machine": machine_line(), "commit": commit(), "runs": measure(opts.processes),
                  "cold": measure(opts.processes, warm=False)}
        print(markdown(stored))
        if opts.no_write:
            return stored
        publish(stored, RESULTS, PAGE, render_page, indent=2)
        return stored
    PAGE.write_text(render_page(PAGE.read_text(), stored))
    return stored


if __name__ == "__main__":
    main()
