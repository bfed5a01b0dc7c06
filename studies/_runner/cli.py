"""``python -m studies``: the command line of the runner."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .protocol import ProtocolError
from .render import render, studies
from .store import Store
from .study import Study


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m studies",
        description="Run a study's selection or test under its protocol, merge parts of a run, or render the "
                    "pages from the stores. `python -m studies render` rewrites every study README and "
                    "docs/results.md.")
    ap.add_argument("study", nargs="?", help=f"one of {studies()}, or 'render' for every page")
    ap.add_argument("action", nargs="?", choices=["select", "test", "render", "merge", "check"], default="render")
    ap.add_argument("parts", nargs="*", type=Path, help="merge: the part stores to join into the study's store")
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
        elif args.action == "check":
            study.check()
            print(f"{study.name}: protocol {study.protocol.hash} keeps its rules")
        elif args.action == "merge":
            added = study.store.merge(Store(p, study.name) for p in args.parts)
            study.store.save()
            print(f"{study.name}: merged {added} new records into {study.store.path}")
        else:
            i, n = (int(x) for x in args.shard.split("/"))
            new = study.run(args.action, (i, n), argv, args.candidate, not args.no_progress)
            print(f"{study.name}: {len(new)} new {args.action} runs stored in {study.store.path}")
    except ProtocolError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    return 0
