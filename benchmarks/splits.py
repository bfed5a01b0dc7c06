"""A recipe over every split of its protocol: Actor's ten geom-gcn splits, a TU set's ten folds.

``python -m benchmarks.splits run --recipe graph_node --config recipes/configs/graph_node_actor.yaml
--name Actor`` runs ``recipes/graph_node.py fit`` once per split (``--data.split_index k``; for
``graph_graph`` ``--data.fold k``), each in its own run directory under ``--workdir``, one after the
other, and writes one JSON file (``--out``, by default ``benchmarks/results/splits_<name>_<config>.json``):
the command of every run, the seed, each split's metrics (``metrics.json``), the validation score of the
checkpoint it tested (read from the best checkpoint's name) and its wall time, and the mean and sample
standard deviation over the splits. The file is rewritten after every split, and a run started again
skips the splits it already holds for the same command.

``--select`` passes ``--test_after_fit false``: each split validates its best checkpoint and writes
validation metrics only, so a run that chooses (a config among candidates) never computes a test
number. Arguments after ``--`` go to every run (``-- --model.encoder.init_args.hops 2``).

``python -m benchmarks.splits compare A.json B.json`` prints the paired differences A - B per split
(same splits, same seed) with their mean, standard deviation and how many splits A wins;
``python -m benchmarks.splits table A.json [B.json ...]`` prints a Markdown table of the runs, one row
per file and a column per split.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
#: Per recipe: the option that picks a split, and how many splits its protocol has.
RECIPES = {"graph_node": ("data.split_index", 10), "graph_graph": ("data.fold", 10)}
_BEST = re.compile(r"best-epoch=(\d+)-(\w+)=([0-9.]+)\.ckpt$")


def parse_splits(text: str, count: int) -> list[int]:
    """``"0-9"``, ``"0,3,5"`` or ``"all"`` as a sorted list of split indices below ``count``."""
    if text == "all":
        return list(range(count))
    out: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.strip().isdigit() or (dash and not hi.strip().isdigit()):
            raise ValueError(f"splits must look like 0-9, 0,3,5 or all, got {text!r}")
        out.update(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    bad = [s for s in out if s >= count]
    if bad:
        raise ValueError(f"splits {bad} do not exist: the protocol has {count} (0 to {count - 1})")
    return sorted(out)


def command(recipe: str, config: str, name: str, split: int, seed: int, select: bool, extra: list[str],
            threads: int = 1) -> list[str]:
    """The recipe's ``fit`` command line for one split, paths relative to the repository."""
    option, _ = RECIPES[recipe]
    cmd = [f"recipes/{recipe}.py", "fit", "--config", config, "--data.name", name, f"--{option}", str(split),
           "--seed_everything", str(seed), "--torch_threads", str(threads)]
    if select:
        cmd += ["--test_after_fit", "false"]
    return cmd + extra


def read_run(run_dir: Path) -> dict[str, Any]:
    """What a finished run left in ``run_dir``: its ``metrics.json``, and the epoch and monitored value of
    the best checkpoint (the one ``fit`` tested or validated)."""
    found = sorted(run_dir.glob("**/metrics.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no metrics.json under {run_dir}: the run did not finish (see its log.txt)")
    out: dict[str, Any] = {"metrics": json.loads(found[-1].read_text())}
    best = [m for p in found[-1].parent.glob("**/best-*.ckpt") if (m := _BEST.search(p.name))]
    if best:
        epoch, monitor, value = best[-1].groups()
        out.update(best_epoch=int(epoch), monitor=monitor, monitored=float(value))
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean, sample standard deviation and count over the runs of every metric (and of the monitored value)."""
    values: dict[str, list[float]] = {}
    for r in runs:
        for key, value in r["metrics"].items():
            values.setdefault(key, []).append(float(value))
        if "monitored" in r:
            values.setdefault(f"best_{r['monitor']}", []).append(float(r["monitored"]))
    return {
        key: {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}
        for key, xs in values.items()
    }


def metric_of(store: dict[str, Any]) -> str:
    """The headline metric of a store: ``test_acc`` (or ``val_acc`` for a selection run), ``_ap`` where the
    task is scored by average precision."""
    stage = "val" if store["select"] else "test"
    keys = set(store["summary"])
    return f"{stage}_ap" if f"{stage}_ap" in keys else f"{stage}_acc"


def run(recipe: str, config: str, name: str, splits: list[int], seed: int, select: bool, extra: list[str],
        out: Path, workdir: Path, threads: int = 1) -> dict[str, Any]:
    """Run every split (skipping those ``out`` holds for the same command) and store the results."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    store: dict[str, Any] = {"recipe": recipe, "config": config, "name": name, "seed": seed, "select": select,
                             "extra": extra, "threads": threads, "runs": []}
    if out.exists():
        old = json.loads(out.read_text())
        if all(old.get(k) == store[k] for k in ("recipe", "config", "name", "seed", "select", "extra")):
            store["runs"] = [r for r in old["runs"] if r["split"] in splits]
    done = {r["split"] for r in store["runs"]}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    for split in splits:
        if split in done:
            print(f"split {split}: stored, skipped", flush=True)
            continue
        cmd = command(recipe, config, name, split, seed, select, extra, threads)
        run_dir = workdir / f"{name}_{Path(config).stem}" / f"split_{split}"
        run_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with (run_dir / "log.txt").open("w") as log:
            # each split in its own directory: the recipe's runs/<config>/ lands there
            argv = [sys.executable, *(str(ROOT / c) if c.endswith((".py", ".yaml")) else c for c in cmd)]
            status = subprocess.run(argv, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        if status:
            tail = (run_dir / "log.txt").read_text()[-3000:]
            raise RuntimeError(f"split {split} failed (exit {status}): python {' '.join(cmd)}\n{tail}")
        result = {"split": split, "command": "python " + " ".join(cmd), **read_run(run_dir),
                  "wall_s": round(time.perf_counter() - started, 1)}
        store["runs"] = sorted([*store["runs"], result], key=lambda r: r["split"])
        store["summary"] = summarize(store["runs"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(store, indent=1) + "\n")
        shown = {k: round(100 * v, 2) for k, v in result["metrics"].items() if k.endswith(("_acc", "_ap"))}
        print(f"split {split}: {shown} ({result['wall_s']:.0f} s)", flush=True)
    store["summary"] = summarize(store["runs"])
    out.write_text(json.dumps(store, indent=1) + "\n")
    key = metric_of(store)
    s = store["summary"][key]
    print(f"{name}, {config}: {key} {100 * s['mean']:.2f} ± {100 * s['std']:.2f} over {s['n']} splits", flush=True)
    return store


def paired(a: dict[str, Any], b: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """Per split, A's ``key`` minus B's (in points), over the splits both hold; their mean, sample standard
    deviation, standard error and the number of splits where A is higher."""
    key = key or metric_of(a)
    va = {r["split"]: 100 * r["metrics"][key] for r in a["runs"]}
    vb = {r["split"]: 100 * r["metrics"][key] for r in b["runs"]}
    common = sorted(set(va) & set(vb))
    if len(common) < 2:
        raise ValueError(f"A and B share {len(common)} splits with {key!r}; paired differences need at least 2")
    diffs = [va[s] - vb[s] for s in common]
    std = statistics.stdev(diffs)
    return {"metric": key, "splits": common, "diffs": diffs, "mean": statistics.fmean(diffs), "std": std,
            "sem": std / math.sqrt(len(diffs)), "wins": sum(d > 0 for d in diffs), "ties": sum(d == 0 for d in diffs)}


def table(stores: list[tuple[str, dict[str, Any]]], key: str | None = None) -> str:
    """Markdown: one row per labelled store, the score of each split and the mean ± std (points)."""
    splits = sorted({r["split"] for _, s in stores for r in s["runs"]})
    key = key or metric_of(stores[0][1])
    lines = [f"| run | {' | '.join(str(s) for s in splits)} | mean ± std |", "|---" * (len(splits) + 2) + "|"]
    for label, store in stores:
        by = {r["split"]: 100 * r["metrics"][key] for r in store["runs"] if key in r["metrics"]}
        cells = [f"{by[s]:.2f}" if s in by else "" for s in splits]
        xs = list(by.values())
        mean = statistics.fmean(xs) if xs else float("nan")
        std = statistics.stdev(xs) if len(xs) > 1 else 0.0
        lines.append(f"| {label} | {' | '.join(cells)} | {mean:.2f} ± {std:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Any:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.splits", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run a recipe on every split and store the results")
    p.add_argument("--recipe", choices=list(RECIPES), required=True)
    p.add_argument("--config", required=True, help="config file, relative to the repository")
    p.add_argument("--name", required=True, help="the data (--data.name): Actor, PROTEINS, MUTAG, ...")
    p.add_argument("--splits", default="all", help="0-9, 0,3,5 or all (default)")
    p.add_argument("--seed", type=int, default=0, help="seed_everything of every run (default: 0)")
    p.add_argument("--select", action="store_true", help="validation only (--test_after_fit false)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default: 1)")
    p.add_argument("--out", type=Path, default=None, help="the JSON file (default: benchmarks/results/...)")
    p.add_argument("--workdir", type=Path, default=Path("runs/splits"), help="run directories (default: runs/splits)")
    for name, help_ in (("compare", "paired differences A - B per split"), ("table", "Markdown table of stores")):
        q = sub.add_parser(name, help=help_)
        q.add_argument("files", type=Path, nargs="+")
        q.add_argument("--metric", default=None, help="metric key (default: test_acc, or val_acc for selection runs)")
    args = parser.parse_args(argv)
    if args.command == "run":
        count = RECIPES[args.recipe][1]
        stem = f"splits_{args.name.lower()}_{Path(args.config).stem}{'_select' if args.select else ''}"
        out = args.out or RESULTS / f"{stem}.json"
        return run(args.recipe, args.config, args.name, parse_splits(args.splits, count), args.seed, args.select,
                   extra, out, args.workdir.resolve(), args.threads)
    stores = [json.loads(f.read_text()) for f in args.files]
    if args.command == "compare":
        if len(stores) != 2:
            parser.error("compare takes two files, A and B")
        d = paired(stores[0], stores[1], args.metric)
        print(f"{d['metric']}, A - B per split {d['splits']}: " + ", ".join(f"{x:+.2f}" for x in d["diffs"]))
        print(f"mean {d['mean']:+.2f} ± {d['std']:.2f} (standard error {d['sem']:.2f}); A higher on {d['wins']} "
              f"of {len(d['diffs'])} splits")
        return d
    text = table([(f.stem, s) for f, s in zip(args.files, stores, strict=True)], args.metric)
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
