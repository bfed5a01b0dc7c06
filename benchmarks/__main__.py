"""``python -m benchmarks``: every case against its peer, as a Markdown table in docs/benchmarks.md.

Options: ``--cases window,graph`` runs a subset; ``--no-write`` only prints; ``--no-density`` skips
the density sweep.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
import traceback
from pathlib import Path

import torch

from benchmarks._cases import CASES, Case
from benchmarks._measure import THREADS_ENV, alternate, peak_in_subprocess, threads, wait_for_idle

ROOT = Path(__file__).resolve().parent.parent
HEADER = Path(__file__).with_name("header.md")


def _ms(t: float | None) -> str:
    return "—" if t is None else f"{1e3 * t:.1f} ms" if t < 10 else f"{t:.1f} s"


def _mb(m: int | str) -> str:
    return m if isinstance(m, str) else f"{m / 2**20:.0f} MB"


def run_case(case: Case, memory: bool) -> str:
    """Check, time and measure one case; return its table row."""
    print(f"== {case.title} vs {case.peer_name}", flush=True)
    start = time.perf_counter()
    try:
        inputs = case.build()
        check = case.check(inputs)
        print(f"   correctness: {check}", flush=True)
    except Exception as err:  # a wrong result is reported, not timed
        traceback.print_exc()
        return f"| {case.title} | {case.peer_name} | correctness check failed: {err} | | | | | {case.target} | no |"
    try:
        peer = case.peer(inputs)
    except Exception as err:
        traceback.print_exc()
        peer, peer_error = None, f"peer failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
    else:
        peer_error = ""
    idle = wait_for_idle()
    print(f"   machine idle before timing: {'yes' if idle else 'no (timed anyway)'}", flush=True)
    try:
        t_peer, t_ours = alternate(peer, case.ours(inputs), case.rounds)
    except Exception as err:  # e.g. the peer's compiler fails on this machine
        traceback.print_exc()
        peer_error = f"peer failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
        t_peer, t_ours = alternate(None, case.ours(inputs), case.rounds)
    del inputs, peer
    gc.collect()
    m_peer: int | str = "—"
    m_ours: int | str = "—"
    if memory:
        m_ours = peak_in_subprocess(case.key, "ours")
        m_peer = peak_in_subprocess(case.key, "peer") if not peer_error else "—"
    if t_peer is None or (isinstance(m_peer, str) and memory) or (isinstance(m_ours, str) and memory):
        ratio, met = peer_error or "incomplete", False
    else:
        ratio, met = case.verdict(
            t_peer,
            t_ours,
            float(m_peer) if memory else 1.0,
            float(m_ours) if memory else 1.0,  # type: ignore[arg-type]
        )
    row = (
        f"| {case.title} | {case.peer_name} | {_ms(t_peer)} | {_ms(t_ours)} | {_mb(m_peer)} | {_mb(m_ours)} "
        f"| {ratio} | {case.target} | {'**yes**' if met else 'no'} |"
    )
    print(f"   {row}   ({time.perf_counter() - start:.0f} s)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print only, do not write docs/benchmarks.md")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--no-density", action="store_true", help="skip the density sweep")
    parser.add_argument(
        "--threads", type=int, default=None, help=f"torch threads of every process (default: ${THREADS_ENV} or 2)"
    )
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        os.environ[THREADS_ENV] = str(args.threads)
    torch.set_num_threads(threads())
    wanted = [c for c in CASES if not args.cases or c.key in args.cases.split(",")]
    started = time.perf_counter()
    rows = [run_case(case, memory=not args.no_memory) for case in wanted]
    table = "\n".join(
        [
            "| case | peer | peer time | attnmm time | peer peak | attnmm peak | result | target | met |",
            "|---|---|---:|---:|---:|---:|---|---|---|",
            *rows,
        ]
    )
    density = ""
    if not args.no_density:
        from benchmarks.density import markdown, sweep

        print("== density sweep (sparse backend vs masked dense SDPA)", flush=True)
        density = markdown(*sweep())
    took = time.perf_counter() - started
    machine = (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {took / 60:.1f} min"
    )
    result = f"## Results\n\n{machine}\n\n{table}\n"
    if density:
        result += f"\n## Density threshold\n\n{density}\n"
    print(result)
    if not args.no_write:
        out = ROOT / "docs" / "benchmarks.md"
        out.parent.mkdir(exist_ok=True)
        out.write_text(HEADER.read_text() + "\n" + result)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
