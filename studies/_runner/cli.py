"""``python -m studies``: the command line of the runner."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from pathlib import Path
from typing import Any

from .protocol import ProtocolError
from .render import render, studies
from .stats import machine
from .store import Store
from .study import Study


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m studies",
        description="Run a study's selection or test under its protocol, merge parts of a run, say where its "
                    "runs stand (status: stored, under way, missing), or render the pages from the stores. "
                    "`python -m studies render` rewrites every study README and docs/results.md.")
    ap.add_argument("study", nargs="?", help=f"one of {studies()}, or 'render' for every page")
    ap.add_argument("action", nargs="?", choices=["select", "test", "render", "merge", "check", "measure", "status"],
                    default="render")
    ap.add_argument("parts", nargs="*", help="merge: the part stores to join into the study's store; measure: "
                    "PART[,PART...] then the study's OPTIONS to change, as key=value (a list: comma-separated)")
    ap.add_argument("--store", type=Path, help="write this run's records to another store (a part of the run)")
    ap.add_argument("--shard", default="0/1", help="i/n: make every n-th missing run from the i-th (default 0/1)")
    ap.add_argument("--candidate", action="append", help="test: these candidates instead of the protocol's")
    ap.add_argument("--out", type=Path, help="render: write the pages under this folder, not the repository")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.study in (None, "render"):
        for path in render(out=args.out):
            print(f"wrote {path}")
        return 0
    try:
        study = Study.load(args.study, args.store)
        if args.action == "render":
            for path in render([args.study], out=args.out):
                print(f"wrote {path}")
        elif args.action == "status":
            print("\n".join(study.status()))
        elif args.action == "check":
            study.check()
            print(f"{study.name}: protocol {study.protocol.hash} keeps its rules")
        elif args.action == "merge":
            added = study.store.merge(Store(Path(p), study.name) for p in args.parts)
            study.store.save()
            print(f"{study.name}: merged {added} new records and detail parts into {study.store.path}")
        elif args.action == "measure":
            measure(study, args.parts[0], args.parts[1:], "python -m studies " + " ".join(argv))
        else:
            i, n = (int(x) for x in args.shard.split("/"))
            new = study.run(args.action, (i, n), argv, args.candidate, not args.no_progress)
            print(f"{study.name}: {len(new)} new {args.action} runs stored in {study.store.path}")
    except ProtocolError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    return 0


def _value(default: Any, text: str) -> Any:
    if isinstance(default, list):
        kind = type(default[0]) if default else str
        return [kind(v.strip()) for v in re.split(r",(?![^()]*\))", text) if v.strip()]
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes")
    return text if default is None else type(default)(text)


def measure(study: Study, parts: str, overrides: list[str], command: str) -> None:
    """Run the study's measurement ``parts`` (the ``MEASURE`` functions of its ``measure`` module) with its ``OPTIONS``
    (``key=value`` overrides) and keep what each returns, ``{detail key: value}`` (a key "a/b" nests), in the
    store's ``detail`` with the run (command, machine, minutes); a module's ``unpack``/``pack`` read and write
    that detail. A part runs on the number of threads its ``threads`` option says, when the module has one."""
    name = f"studies.{study.name}.measure"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise SystemExit(f"{study.name} has no measurements (studies/{study.name}/measure.py)") from None
    opts = dict(getattr(module, "OPTIONS", {}))
    for kv in overrides:
        key, _, text = kv.partition("=")
        key = key.replace("-", "_")
        if key not in opts:
            raise SystemExit(f"unknown option {key!r}; {study.name}'s options are {sorted(opts)}")
        opts[key] = _value(opts[key], text)
    for part in parts.split(","):
        if part not in module.MEASURE:
            raise SystemExit(f"unknown part {part!r}; {study.name}'s parts are {sorted(module.MEASURE)}")
        detail = getattr(module, "unpack", dict)(study.store.data.get("detail", {}))
        ns = argparse.Namespace(**opts, command=command, detail=detail)
        if "threads" in opts:
            import torch

            torch.set_num_threads(opts["threads"])
        started = time.perf_counter()
        result = module.MEASURE[part](ns)
        run = {"command": command, "machine": machine(), "minutes": round((time.perf_counter() - started) / 60, 1)}
        for path, value in result.items():
            *outer, last = path.split("/")
            node = detail
            for k in outer:
                node = node.setdefault(k, {})
            node[last] = {**value, "run": run}
        if result:  # else the part kept what it made itself
            study.store.data["detail"] = getattr(module, "pack", dict)(detail)
            study.store.save()
            print(f"{study.name}: {', '.join(result)} stored in {study.store.path}; "
                  f"write the pages with python -m studies {study.name} render")
