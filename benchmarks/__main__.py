"""``python -m benchmarks``: every case against its peer, stored and shown as a table in docs/benchmarks.md.

The rows are stored in ``benchmarks/results/benchmarks.json``; docs/benchmarks.md and the quoted
figures of docs/comparison.md are then rendered from that store alone (:mod:`benchmarks._page`,
:mod:`benchmarks._comparison`), so a page never quotes another run than the table's.

Options: ``--cases window,graph`` runs a subset (the store then holds only those rows);
``--update`` with ``--cases`` re-runs those rows into the stored results and keeps every other row,
the recipe steps and the density sweep as stored (the machine line then says which rows ran when);
``--memory-only`` measures the memory of the stored rows (or of ``--cases``) again in fresh
processes and recomputes their verdicts from the stored times;
``--no-write`` only prints; ``--no-density`` skips the density sweep; ``--no-recipe-steps`` skips
the recipe steps (:mod:`benchmarks.recipe_steps`); ``--render-only`` runs nothing
and rewrites both pages from the store.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
import traceback
from typing import Any

import torch

from benchmarks._cases import CASES, Case
from benchmarks._comparison import COMPARISON
from benchmarks._comparison import render_page as render_comparison
from benchmarks._measure import (
    THREADS_ENV,
    alternate_rounds,
    peak_in_subprocess,
    peer_environment,
    spread,
    threads,
    wait_for_idle,
)
from benchmarks._page import PAGE, ROOT, STORE, load, render_page, render_results, render_row, save


def run_case(case: Case, memory: bool) -> dict[str, Any]:
    """Check, time and measure one case; return its stored row (:mod:`benchmarks._page`)."""
    print(f"== {case.title} vs {case.peer_name}", flush=True)
    start = time.perf_counter()
    row: dict[str, Any] = {
        "key": case.key,
        "title": case.title,
        "peer": case.peer_name,
        "target": case.target,
        "t_peer": None,
        "t_ours": None,
        "m_peer": None,
        "m_ours": None,
        "met": False,
    }
    try:
        inputs = case.build()
        check = case.check(inputs)
        print(f"   correctness: {check}", flush=True)
    except Exception as err:  # a wrong result is reported, not timed
        traceback.print_exc()
        return {**row, "result": f"correctness check failed: {err}"}
    try:
        peer = case.peer(inputs)
    except Exception as err:
        traceback.print_exc()
        peer, peer_error = None, f"peer failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
    else:
        peer_error = ""
    idle = wait_for_idle()
    print(f"   machine idle before timing: {'yes' if idle else 'no (timed anyway)'}", flush=True)
    rounds = max(case.rounds, 3)  # the spread needs at least three rounds
    try:
        pairs = alternate_rounds(peer, case.ours(inputs), rounds)
    except Exception as err:  # e.g. the peer's compiler fails on this machine
        traceback.print_exc()
        peer_error = f"peer failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
        pairs = alternate_rounds(None, case.ours(inputs), rounds)
    peers = [tp for tp, _ in pairs if tp is not None]
    t_peer, t_ours = (min(peers) if peers else None), min(to for _, to in pairs)
    row["spread"] = spread(pairs)
    del inputs, peer
    gc.collect()
    row.update(t_peer=t_peer, t_ours=t_ours)
    settle(case, row, peer_error, memory)
    print(f"   {render_row(row)}   ({time.perf_counter() - start:.0f} s)", flush=True)
    return row


def settle(case: Case, row: dict[str, Any], peer_error: str, memory: bool) -> None:
    """Measure ``case``'s memory in fresh processes (unless not ``memory``) and write the verdict of
    ``row``'s times and those peaks into ``row``."""
    m_peer: dict[str, int] | str | None = None
    m_ours: dict[str, int] | str | None = None
    if memory:
        m_ours = peak_in_subprocess(case.key, "ours")
        m_peer = peak_in_subprocess(case.key, "peer") if not peer_error else None
    memory_error = next((m for m in (m_ours, m_peer) if isinstance(m, str)), "")
    t_peer, t_ours = row["t_peer"], row["t_ours"]
    if t_peer is None or memory_error or (memory and m_peer is None):
        ratio, met = peer_error or (f"peak not measured: {memory_error}" if memory_error else "incomplete"), False
    else:
        ratio, met = case.verdict(
            t_peer,
            t_ours,
            float(m_peer["peak"]) if isinstance(m_peer, dict) else 1.0,
            float(m_ours["peak"]) if isinstance(m_ours, dict) else 1.0,
        )
    row.update(
        result=ratio,
        met=met,
        m_peer=m_peer["peak"] if isinstance(m_peer, dict) else None,
        m_ours=m_ours["peak"] if isinstance(m_ours, dict) else None,
        held_peer=m_peer["held"] if isinstance(m_peer, dict) else None,
        held_ours=m_ours["held"] if isinstance(m_ours, dict) else None,
    )


def remeasure_memory(store: dict[str, Any], wanted: list[Case], write_pages: bool) -> None:
    """Measure the memory of ``wanted``'s stored rows again (fresh processes) and recompute their verdicts
    from the stored times; everything else stays as stored."""
    started = time.perf_counter()
    rows = {r["key"]: r for r in store["rows"]}
    for case in wanted:
        row = rows.get(case.key)
        if row is None or row.get("t_ours") is None:
            print(f"== {case.key}: no stored times, skipped (run it with --update)", flush=True)
            continue
        print(f"== memory of {case.title} vs {case.peer_name}", flush=True)
        peer_error = row["result"] if row["t_peer"] is None else ""
        settle(case, row, peer_error, memory=True)
        print(f"   {render_row(row)}", flush=True)
    store["machine"] = (
        f"{store.get('machine', '')}; memory of every row re-measured "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({(time.perf_counter() - started) / 60:.1f} min)"
    )
    store["memory"] = "first three calls in a fresh process"
    store["environment"] = peer_environment()
    print(render_results(store))
    if write_pages:
        write(store)


def write(store: dict[str, Any]) -> None:
    """Store the results and rewrite the pages from the store alone."""
    save(store, STORE)
    PAGE.write_text(render_page(store))
    COMPARISON.write_text(render_comparison(COMPARISON.read_text(), store))
    print(f"wrote {STORE.relative_to(ROOT)}, {PAGE.relative_to(ROOT)} and {COMPARISON.relative_to(ROOT)}")


def update(store: dict[str, Any], wanted: list[Case], memory: bool, write_pages: bool) -> None:
    """Re-run ``wanted`` into ``store``: their rows replaced (or added in the order of CASES), the rest kept."""
    started = time.perf_counter()
    fresh = {case.key: run_case(case, memory=memory) for case in wanted}
    old = {r["key"]: r for r in store["rows"]}
    store["rows"] = [fresh.get(c.key) or old[c.key] for c in CASES if c.key in fresh or c.key in old]
    store["environment"] = peer_environment()
    store["machine"] = (
        f"{store.get('machine', '')}; rows {', '.join(fresh)} re-run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({threads()} threads, "
        f"{(time.perf_counter() - started) / 60:.1f} min)"
    )
    print(render_results(store))
    if write_pages:
        write(store)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    parser.add_argument(
        "--update", action="store_true", help="with --cases: replace those rows of the store, keep the rest as stored"
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="measure the memory of the stored rows (or --cases) again and recompute their verdicts; times as stored",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, do not store or write the pages")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--no-density", action="store_true", help="skip the density sweep")
    parser.add_argument(
        "--no-recipe-steps", action="store_true", help="skip the recipe steps (Full vs the mask, before and after)"
    )
    parser.add_argument(
        "--render-only", action="store_true", help="run nothing: rewrite the pages from the stored results"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help=f"torch threads of every process (default: ${THREADS_ENV} or 2)"
    )
    args = parser.parse_args()
    if args.render_only:
        write(load())
        return
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        os.environ[THREADS_ENV] = str(args.threads)
    torch.set_num_threads(threads())
    names = [n for n in args.cases.split(",") if n]
    unknown = sorted(set(names) - {c.key for c in CASES})
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; the cases are {', '.join(c.key for c in CASES)}")
    if args.update and not names:
        parser.error("--update re-runs the cases named by --cases")
    wanted = [c for c in CASES if not names or c.key in names]
    if args.memory_only:
        remeasure_memory(load(), wanted, write_pages=not args.no_write)
        return
    if args.update:
        update(load(), wanted, memory=not args.no_memory, write_pages=not args.no_write)
        return
    started = time.perf_counter()
    store: dict[str, Any] = {"rows": [run_case(case, memory=not args.no_memory) for case in wanted]}
    if not args.no_recipe_steps:
        from benchmarks import recipe_steps

        print("== recipe steps: Full vs the recipe's mask, before and after dispatch by cost", flush=True)
        samples, steps = 7, 3
        store["recipe_steps"] = {
            "rows": recipe_steps.sweep(samples=samples, steps=steps),
            "threads": threads(),
            "samples": samples,
            "steps": steps,
        }
    if not args.no_density:
        from benchmarks.density import sweep

        print("== density sweep (sparse backend vs masked dense SDPA)", flush=True)
        rows, crossover = sweep()
        store["density"] = {"rows": rows, "crossover": crossover}
    took = time.perf_counter() - started
    store["environment"] = peer_environment()
    store["machine"] = (
        f"{platform.processor() or platform.machine()}, {threads()} threads, torch {torch.__version__}, "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {took / 60:.1f} min"
    )
    print(render_results(store))
    if not args.no_write:
        write(store)


if __name__ == "__main__":
    main()
