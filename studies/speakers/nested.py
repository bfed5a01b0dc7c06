"""The leave-one-speaker-out study whose selection sees only each fold's training speakers.

``python -m studies.speakers.nested select|test [--workers N]`` runs the runs of the protocol
``many_voices_nested.json`` (beside this file) that its store does not hold yet, ``N`` at a time, each
``recipes/speech_truncated.py fit`` in a fresh process on one thread; every run is stored as it ends,
with its command, the protocol's hash and its wall time. ``select`` computes no test number (the recipe
runs with ``--test_after_fit=false``); ``test`` runs each fold's chosen candidate once.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = Path(__file__).with_name("many_voices_nested.json")


def protocol() -> dict[str, Any]:
    return json.loads(PROTOCOL.read_text())


def protocol_hash() -> str:
    return hashlib.sha256(PROTOCOL.read_bytes()).hexdigest()[:16]


def recordings(speaker: str, root: str | None = None) -> set[str]:
    """The FSDD recordings of ``speaker`` (file names), from the data folder."""
    folder = Path(root or os.environ["ATTNMM_DATA"]) / "fsdd" / "recordings"
    return {p.name for p in folder.glob(f"*_{speaker}_*.wav")}


def check_disjoint(test: str, val: str) -> None:
    """Refuse a selection run whose validation recordings meet the fold's test recordings."""
    shared = recordings(test) & recordings(val)
    if test == val or shared:
        raise ValueError(f"validation {val} shares recordings with test {test}: {sorted(shared)[:3]}")


def runs(part: str, folds: list[str] | None = None) -> list[dict[str, Any]]:
    """The runs of ``part`` (``select`` or ``test``) in order, of the folds named (all by default);
    ``test`` needs those folds' stored choices."""
    p = protocol()
    common = [f"--config={p['config']}", "--trainer.enable_progress_bar=false", f"--seed_everything={p['seed']}"]
    out = []
    chosen = choices(folds) if part == "test" else {}
    for fold in p["folds"]:
        if folds is not None and fold["test"] not in folds:
            continue
        if part == "select":
            for sel in fold["selection"]:
                check_disjoint(fold["test"], sel["val"])
                for name, options in p["candidates"].items():
                    cmd = [p["recipe"], "fit", *common, f"--data.test_speakers=[{fold['test']}]",
                           f"--data.val_speakers=[{sel['val']}]", *options, "--test_after_fit=false"]
                    out.append({"fold": fold["test"], "val": sel["val"], "candidate": name, "command": cmd})
        else:
            name = chosen[fold["test"]]
            cmd = [p["recipe"], "fit", *common, f"--data.test_speakers=[{fold['test']}]", *p["candidates"][name]]
            out.append({"fold": fold["test"], "val": "draw", "candidate": name, "command": cmd})
    return out


def store_path(part: str) -> Path:
    return ROOT / protocol()["stores"]["selection" if part == "select" else "test"]


def load(part: str) -> list[dict[str, Any]]:
    path = store_path(part)
    return json.loads(path.read_text())["runs"] if path.exists() else []


def choices(folds: list[str] | None = None) -> dict[str, str]:
    """Each fold's chosen candidate (of the folds named, all by default), from the selection store (every
    selection run of those folds must be there)."""
    p = protocol()
    stored = load("select")
    chosen = {}
    for fold in p["folds"]:
        if folds is not None and fold["test"] not in folds:
            continue
        scores = {}
        for name in p["candidates"]:
            mine = [r["val_acc"] for r in stored if r["fold"] == fold["test"] and r["candidate"] == name]
            if len(mine) != len(fold["selection"]):
                raise RuntimeError(f"the selection of fold {fold['test']} is not complete ({name})")
            scores[name] = statistics.fmean(mine)
        chosen[fold["test"]] = max(scores, key=lambda n: (scores[n], -list(p["candidates"]).index(n)))
    return chosen


def best_val(run_dir: Path) -> float:
    values = []
    for path in run_dir.glob("**/metrics.csv"):
        with path.open() as f:
            values += [float(row["val_acc"]) for row in csv.DictReader(f) if row.get("val_acc")]
    return max(values)


def execute(run: dict[str, Any], part: str) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    log_dir = ROOT / "runs" / "many_voices_nested"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{part}_{run['fold']}_{run['candidate']}.log"
    with tempfile.TemporaryDirectory() as tmp, log.open("w") as sink:
        loggers = [{"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": tmp, "name": "csv"}}]
        start = time.time()
        status = subprocess.call(
            ["nice", "-n", "10", sys.executable, str(ROOT / run["command"][0]), *run["command"][1:],
             f"--trainer.default_root_dir={tmp}", f"--trainer.logger={json.dumps(loggers)}"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
        seconds = time.time() - start
        if status:
            raise RuntimeError(f"{run['command']} failed (exit {status}); see {log}")
        (metrics_file,) = Path(tmp).glob("**/metrics.json")
        metrics = json.loads(metrics_file.read_text())
        val = best_val(Path(tmp))
    if part == "select" and any(k.startswith("test") for k in metrics):
        raise RuntimeError("a selection run computed a test number")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {**{k: run[k] for k in ("fold", "val", "candidate")}, "command": " ".join(["python", *run["command"]]),
            "val_acc": val, "test_acc": metrics.get("test_acc"), "metrics": metrics, "seconds": round(seconds, 1),
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit.stdout.strip(),
            "protocol_sha256": protocol_hash()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["select", "test", "folds", "show", "import"],
                        help="folds: fold by fold, each fold's test run as soon as its selection is stored "
                        "(each fold's choice reads only its own selection runs)")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    if args.part == "show":
        for part in ("select", "test"):
            for r in load(part):
                print(part, r["fold"], r["val"], r["candidate"], r["val_acc"], r["test_acc"], r["seconds"])
        return
    if args.part == "folds":
        run_folds(args.workers)
        return
    if args.part == "import":
        print(f"{import_records()} records of protocol 4 in studies/speakers/store.json")
        return
    todo = [r for r in runs(args.part) if not done(r, args.part)]
    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(lambda r: one(r, args.part), todo))
    if args.part == "select":
        print(json.dumps(choices(), indent=1))


_LOCK = threading.Lock()


def done(run: dict[str, Any], part: str) -> bool:
    return " ".join(["python", *run["command"]]) in {r["command"] for r in load(part)}


def one(run: dict[str, Any], part: str) -> None:
    """Run ``run`` and add its record to the store of ``part`` (read and written under a lock)."""
    record = execute(run, part)
    with _LOCK:
        stored = load(part)
        stored.append(record)
        path = store_path(part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"protocol": PROTOCOL.name, "runs": stored}, indent=1) + "\n")
    print(f"{run['fold']} {run['candidate']}: val {record['val_acc']:.4f} test {record['test_acc']} "
          f"({record['seconds']:.0f} s)", flush=True)


def run_folds(workers: int) -> None:
    """Fold by fold on ``workers`` threads: a fold's selection runs, then its test run as soon as they are
    stored (before the next fold's selection runs, which may run beside it)."""
    folds = [f["test"] for f in protocol()["folds"]]
    pending = {f: [r for r in runs("select", [f]) if not done(r, "select")] for f in folds}
    tested = {f for f in folds if not pending[f] and all(done(r, "test") for r in runs("test", [f]))}
    running: dict[Any, tuple[str, str]] = {}
    with ThreadPoolExecutor(workers) as pool:
        while len(tested) < len(folds) or running:
            while len(running) < workers:
                task = _next_task(folds, pending, tested, running)
                if task is None:
                    break
                kind, fold, run = task
                running[pool.submit(one, run, kind)] = (kind, fold)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                kind, fold = running.pop(future)
                future.result()
                if kind == "test":
                    tested.add(fold)


def _next_task(folds: list[str], pending: dict[str, list[dict[str, Any]]], tested: set[str],
               running: dict[Any, tuple[str, str]]) -> tuple[str, str, dict[str, Any]] | None:
    busy = set(running.values())
    for fold in folds:  # a fold's test first, once its selection is stored
        if fold not in tested and not pending[fold] and ("select", fold) not in busy and ("test", fold) not in busy:
            return "test", fold, runs("test", [fold])[0]
    for fold in folds:
        if pending[fold]:
            return "select", fold, pending[fold].pop(0)
    return None



#: The flag of every test record of this protocol (its caveat, in the store).
RETEST = ("test speakers scored before: both candidates were tested on these five speakers under the same test "
          "protocol (protocols 2-3) before this protocol was written; the selection saw no test recording")


def import_records() -> int:
    """Write this protocol's runs, as stored by this module, into the study's ``store.json`` as records of
    ``protocol.json`` (its transliteration into the runner's format), replacing the ones there; returns
    how many. Then ``python -m studies speakers render`` (and ``python -m studies render`` for the results
    page) renders them."""
    from studies._runner import Protocol, Store

    folder = Path(__file__).parent
    proto = Protocol(json.loads((folder / "protocol.json").read_text()))
    store = Store(folder / "store.json", "speakers")
    store.data["records"] = [r for r in store.records if r["protocol"] != proto.hash]
    store.data["scored"].pop(proto.hash, None)
    count = 0
    for part in ("select", "test"):
        for r in load(part):
            t = r["fold"]
            base = {"legacy": False, "command": r["command"], "commit": r["commit"], "dirty": None,
                    "started": r["finished"], "seconds": r["seconds"], "unit": "%",
                    "driver": "python -m studies.speakers.nested", "driver_protocol_sha256": r["protocol_sha256"],
                    "imported_from": f"studies/speakers/stores/{store_path(part).name}"}
            if part == "select":
                scores = {f"val_sel_{t}": {"accuracy": round(100 * r["val_acc"], 2)}}
                store.add({"kind": "select", "split": f"sel_{t}", "candidate": r["candidate"], "seed": 0,
                           "protocol": proto.hash, "scores": scores, **base}, proto.data)
            else:
                recordings = [f"{d}_{t}_{k}" for d in range(10) for k in range(50)]
                store.add({"kind": "test", "split": f"test_{t}", "candidate": r["candidate"], "seed": 0,
                           "protocol": proto.hash, "scores": {f"test_{t}": {"accuracy": round(100 * r["test_acc"], 2)}},
                           "val_draw": round(100 * r["val_acc"], 2), "flags": [RETEST], **base}, proto.data,
                          {"speaker": [t], "recording": recordings})
            count += 1
    store.save()
    return count


if __name__ == "__main__":
    main()
