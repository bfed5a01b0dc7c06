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
baseline / candidate of the medians and of each round's pair. ``--profile`` also runs the candidate's
batches under ``torch.profiler`` (one thread) and splits their operator time by kind: the attention
kernel, the matrix products, message passing's gathers and scatters, elementwise work, normalisation,
copies, the rest. The run goes into ``benchmarks/results/peptides_epoch.json`` and the graph guide's
table is rendered from it (``--render-only`` renders the store again).
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
from typing import Any

HERE = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "peptides_epoch.json"
PAGE = HERE / "docs" / "graphs.md"
START, END = "<!-- peptides_epoch:start -->", "<!-- peptides_epoch:end -->"

#: Operator kinds of the profile, by aten operator name (self time; the first kind whose test matches).
KINDS: list[tuple[str, Any]] = [
    ("attention kernel (fused SDPA, forward and backward)", lambda n: "scaled_dot_product" in n),
    ("matrix products (linear layers)", lambda n: n in {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"}),
    ("gathers and scatters (message passing, embeddings)", lambda n: any(
        k in n for k in ("index_select", "gather", "scatter", "index_add", "embedding", "aten::index"))),
    ("copies and concatenation", lambda n: n in {"aten::copy_", "aten::cat", "aten::clone", "aten::contiguous"}),
    ("normalisation", lambda n: "batch_norm" in n or "layer_norm" in n),
    ("elementwise and reductions", lambda n: n.split("::")[-1].rstrip("_") in {
        "add", "mul", "sub", "div", "clamp_min", "threshold_backward", "relu", "gelu", "sum", "mean", "fill",
        "zero", "where", "masked_fill", "neg", "exp", "log", "sigmoid", "addcmul", "addcdiv", "sqrt", "lerp",
        "_foreach_add", "_foreach_mul", "_foreach_lerp", "_foreach_addcmul", "_foreach_addcdiv", "_foreach_sqrt",
        "_foreach_div", "native_dropout", "binary_cross_entropy_with_logits", "sort", "amin", "amax"}),
]


def _child(checkout: Path, threads: int, batches: int, warmup: int, profile: bool = False) -> dict[str, Any]:
    """One measurement in this process, with ``attnmm`` and the recipe of ``checkout``; with ``profile``, the
    timed batches run under ``torch.profiler`` and the operator time by kind is returned instead."""
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
        if profile:
            return _profiled(cli, timer, warmup, batches)
        cli.trainer.fit(cli.model, cli.datamodule)
    return {
        "wall": statistics.median(timer.wall[warmup:]),
        "cpu": statistics.median(timer.cpu[warmup:]),
        "load": statistics.median(timer.load[warmup:]) if timer.load[warmup:] else 0.0,
        "params": sum(p.numel() for p in cli.model.parameters()),
    }


def _profiled(cli: Any, timer: Any, warmup: int, batches: int) -> dict[str, Any]:
    """Run the recipe's ``fit`` with the profiler on for the ``batches`` after the first ``warmup``: the self time of
    their operators by kind, per batch."""
    from lightning.pytorch.callbacks import Callback
    from torch.profiler import profile, schedule

    totals: dict[str, float] = {}

    def keep(prof: Any) -> None:
        for event in prof.key_averages():
            totals[event.key] = totals.get(event.key, 0.0) + event.self_cpu_time_total / 1e6

    class Step(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            prof.step()

    cli.trainer.callbacks.append(Step())
    with profile(schedule=schedule(wait=max(warmup - 1, 0), warmup=1 if warmup else 0, active=batches, repeat=1),
                 on_trace_ready=keep) as prof:
        cli.trainer.fit(cli.model, cli.datamodule)
    kinds = {name: 0.0 for name, _ in KINDS}
    rest = 0.0
    for name, seconds in totals.items():
        kind = next((k for k, test in KINDS if test(name)), None)
        if kind is not None:
            kinds[kind] += seconds
        elif name.startswith("aten::"):
            rest += seconds
    timed = timer.wall[warmup:] + timer.load[warmup:]  # the batches' steps and the loading between them
    return {"batches": batches, "wall": sum(timed) / batches,
            "kinds": {k: v / batches for k, v in kinds.items()}, "other operators": rest / batches}


def _run(checkout: Path, threads: int, batches: int, warmup: int, profile: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads), "MPLBACKEND": "Agg"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(checkout), "--threads", str(threads),
           "--batches", str(batches), "--warmup", str(warmup), *(["--profile"] if profile else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(checkout))
    if done.returncode != 0:
        raise RuntimeError(f"the measurement in {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s (rounds {min(values):.3f}-{max(values):.3f})"


def markdown(stored: dict[str, Any]) -> str:
    """The page's tables: time a batch, baseline over candidate, per thread count; the profile by kind."""
    lines = ["| threads | baseline (`" + stored["baseline"] + "`) | this checkout | baseline / this |",
             "|---:|---:|---:|---:|"]
    for threads, got in stored["threads"].items():
        base, cand = ([m["wall"] for m in got[k]] for k in ("baseline", "candidate"))
        paired = sorted(b / c for b, c in zip(base, cand, strict=True))
        ratio = statistics.median(base) / statistics.median(cand)
        lines.append(f"| {threads} | {_summary(base)} | {_summary(cand)} | "
                     f"{ratio:.2f}x (rounds {paired[0]:.2f}-{paired[-1]:.2f}) |")
    lines += ["", "Time a training batch (forward, backward, optimiser step) of "
              f"`recipes/configs/graph_graph_peptides.yaml`, {stored['batches']} batches of 64 peptides per process "
              f"after {stored['warmup']} untimed, medians of {stored['rounds']} alternating rounds of fresh processes, "
              f"{stored['machine']}, code at `{stored['commit']}`. Loading a batch between steps: "
              + ", ".join(f"{statistics.median(m.get('load', 0.0) for m in got['candidate']) * 1e3:.1f} ms"
                          f" ({threads} thread(s))" for threads, got in stored["threads"].items()) + "."]
    prof = stored.get("profile")
    if prof:
        total = sum(prof["kinds"].values()) + prof["other operators"]
        lines += ["", "| operator time of one batch, by kind (one thread, under the profiler) | ms | share |",
                  "|---|---:|---:|"]
        for kind, sec in [*prof["kinds"].items(), ("other operators", prof["other operators"])]:
            lines.append(f"| {kind} | {sec * 1e3:.0f} | {sec / total:.0%} |")
        lines.append(f"| all operators (a batch took {prof['wall'] * 1e3:.0f} ms of wall time under the profiler, "
                     "loading included, mean) "
                     f"| {total * 1e3:.0f} | 100% |")
    return "\n".join(lines)


def render_page(page: str, stored: dict[str, Any]) -> str:
    from benchmarks._page import generated

    return generated(page, START, END, "python benchmarks/peptides_epoch.py", RESULTS, [markdown(stored)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout (its root: attnmm/ and recipes/)")
    parser.add_argument("--candidate", type=Path, default=HERE, help="the checkout measured against it "
                        "(default: the one holding this script)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30, help="batches timed per process")
    parser.add_argument("--warmup", type=int, default=3, help="batches run first and not timed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--profile", action="store_true", help="also profile the candidate's batches (one thread)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render the page's tables from the store")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child.resolve(), args.threads[0], args.batches, args.warmup, args.profile)))
        return
    if args.render_only:
        stored = json.loads(RESULTS.read_text())
        PAGE.write_text(render_page(PAGE.read_text(), stored))
        print(markdown(stored))
        return
    if args.baseline is None:
        parser.error("--baseline is required")
    from benchmarks._measure import commit, machine_line

    checkouts = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    print(f"baseline {checkouts['baseline']}, candidate {checkouts['candidate']}; {args.batches} batches of the "
          f"Peptides-func recipe per process after {args.warmup} untimed, {args.rounds} alternating rounds")
    stored: dict[str, Any] = {
        "machine": machine_line(), "commit": commit(), "rounds": args.rounds, "batches": args.batches,
        "warmup": args.warmup, "threads": {},
        "baseline": subprocess.run(["git", "-C", str(checkouts["baseline"]), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip() or str(checkouts["baseline"]),
    }
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
        stored["threads"][str(threads)] = got
    if args.profile:
        stored["profile"] = _run(checkouts["candidate"], 1, args.batches, args.warmup, profile=True)
    print(markdown(stored))
    if args.no_write:
        return
    from benchmarks._page import publish

    publish(stored, RESULTS, PAGE, render_page)


if __name__ == "__main__":
    main()
