"""A study: its folder (protocol, README, store) and its module, and the two runs the runner makes of it.

The study's module (``studies/<name>/__init__.py``) defines only what is specific to it:

``resolve(spec, protocol) -> Items``
    the concrete items of one named set (its ``spec`` from the protocol's ``sets``), with the ids the
    runner compares: recordings, speakers, graphs, folds, nodes.
``run(candidate, seed, train, evaluate, budget) -> scores`` (or ``(scores, detail)``)
    train ``candidate`` (its spec from the protocol) with ``seed`` on ``train`` (the resolved training set,
    or None) and score it on every set in ``evaluate`` (a mapping of set name to Items): returns
    ``{set name: {metric: value}}``. During selection ``evaluate`` holds the validation sets only and
    asking it for any other set raises :class:`ProtocolError`; a test run's ``evaluate.selection`` holds
    the store's selection runs under the protocol (a choice made inside a candidate reads them).

and optionally ``progress(candidate, seed, kind, budget) -> dict | None`` (how far a run not stored yet has
gone, for ``status``: :func:`~studies._runner.train.fit_progress` of its fit), ``render(view) -> list[str]``
(the README's results section; default: the runner's tables), ``blocks(view) -> {"docs/page.md#block":
[lines]}`` (generated blocks of docs pages) and ``summary(view) -> [row, ...]`` (its rows of docs/results.md,
see :mod:`studies._runner.render`).
"""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

from .protocol import Items, Protocol, ProtocolError, check_disjoint, check_unscored, moved_edits
from .store import Record, Store

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"


class Sets(Mapping[str, Items]):
    """The sets one run may score: any other name of the protocol raises, so a selection run cannot
    compute a test number."""

    def __init__(self, kind: str, items: Mapping[str, Items], protocol: Protocol, selection: Iterable[Record] = ()):
        self._kind, self._items, self.protocol = kind, dict(items), protocol
        self.selection = list(selection)  # a test run's: the store's selection runs under the protocol

    @property
    def kind(self) -> str:
        """"select" or "test": the run these sets are for."""
        return self._kind

    def __getitem__(self, name: str) -> Items:
        if name not in self._items:
            role = "a test set" if name in self.protocol.test_sets else "not one of this run's sets"
            raise ProtocolError(f"a {self._kind} run may not score {name!r} ({role}); it may score "
                                f"{sorted(self._items)}")
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


class Study:
    """A study folder and its module. ``store`` may name another store (a part of a run)."""

    def __init__(self, folder: Path, module: ModuleType, store: Path | None = None):
        self.folder = Path(folder)
        self.name = self.folder.name
        self.module = module
        self.protocol = Protocol(json.loads((self.folder / "protocol.json").read_text()))
        self.store = Store(store or self.folder / "store.json", self.name)
        self._resolved: dict[str, Items] = {}

    @classmethod
    def load(cls, name: str, store: Path | None = None) -> Study:
        folder = STUDIES / name
        if not (folder / "protocol.json").exists():
            known = sorted(p.parent.name for p in STUDIES.glob("*/protocol.json"))
            raise SystemExit(f"no study {name!r}; the studies are {known}")
        return cls(folder, importlib.import_module(f"studies.{name}"), store)

    # ---------------------------------------------------------------- the protocol's checks
    def resolve(self, name: str) -> Items:
        if name not in self._resolved:
            items = self.module.resolve(self.protocol.spec(name), self.protocol.data)
            if not isinstance(items, Items):
                raise TypeError(f"{self.name}.resolve must return Items, not {type(items).__name__}")
            self._resolved[name] = items
        return self._resolved[name]

    def check(self) -> None:
        """Refuse the protocol when a validation set shares an item with a test set, or when its test sets
        hold items that another protocol of the study already scored."""
        edited = moved_edits(self.protocol.data, ROOT)
        if edited:
            raise ProtocolError(f"{edited} moved since the protocol's runs and their content changed since the move: "
                                "that is a new protocol (drop its 'moved' entry and name a fresh test set)")
        p = self.protocol
        tests = {t: self.resolve(t) for t in p.test_sets}
        if p.data.get("select", {}).get("per") == "split":
            for s in p.splits:
                mine = {t: tests[t] for t in s.test}
                check_disjoint({v: self.resolve(v) for v in s.validation}, mine)
                if s.inner_train:
                    check_disjoint({s.inner_train: self.resolve(s.inner_train)}, mine, "inner training")
        else:
            check_disjoint({v: self.resolve(v) for v in p.validation_sets}, tests)
        check_unscored(tests, self.store.scored, p.hash, p.retest[0])

    # ---------------------------------------------------------------- runs
    def planned(self, kind: str, candidates: list[str] | None = None) -> list[tuple[str, str, int]]:
        names = candidates if candidates is not None else list(self.protocol.candidates)
        splits = [s for s in self.protocol.splits if (s.validation if kind == "select" else s.test)]
        return [(s.name, c, seed) for s in splits for c in names for seed in self.protocol.seeds(kind)]

    def selected(self, split: str | None = None) -> list[str]:
        """The candidates the protocol tests: its ``test_candidates`` list, or the winner of the selection
        runs under its ``select`` rule (every selection run must be in the store); with ``"selected per
        split"``, the winner of ``split``'s own selection runs."""
        chosen = self.protocol.data.get("test_candidates", "selected")
        if not isinstance(chosen, str):
            return list(chosen)
        per_split = self.protocol.per_split
        if per_split and split is None:
            raise ValueError("the protocol selects per split: name the split")
        planned = [k for k in self.planned("select") if not per_split or k[0] == split]
        missing = [k for k in planned if ("select", *k, self.protocol.hash) not in self.store.keys()]
        if missing:
            raise ProtocolError(f"{len(missing)} selection runs are missing (e.g. {missing[0]}); run "
                                f"`python -m studies {self.name} select` first")
        rule = self.protocol.data.get("select", {"metric": "accuracy", "mode": "max"})
        means = {}
        for c in self.protocol.candidates:
            vals = [m[rule["metric"]] for r in self.store.select("select", self.protocol.hash)
                    if r["candidate"] == c and (not per_split or r["split"] == split) for m in r["scores"].values()]
            means[c] = sum(vals) / len(vals)
        return [(max if rule.get("mode", "max") == "max" else min)(means, key=means.__getitem__)]

    def status(self, now: float | None = None) -> list[str]:
        """Where the protocol's runs stand: per kind, a table of its candidates and seeds (a stored run's score
        on its first set, by the protocol's ``select`` metric; how far a fit not stored yet has gone, where the
        study's module says, ``progress(candidate, seed, kind, budget)``; else a dash), then a line on each
        fit under way (its epochs, best validation score, pace and time to go)."""
        p = self.protocol
        metric = p.data.get("select", {}).get("metric", "accuracy")
        progress = getattr(self.module, "progress", None)
        budget = p.data.get("budget", {})
        now = time.time() if now is None else now
        stored = {(r["kind"], r["split"], r["candidate"], r["seed"]): r for r in self.store.records
                  if r["protocol"] == p.hash}
        lines, going = [f"{self.name}: protocol {p.hash}"], []
        for kind in ("select", "test"):
            try:
                if kind == "test" and p.per_split:
                    planned = [k for s in p.splits if s.test for k in self.planned(kind, self.selected(s.name))
                               if k[0] == s.name]
                else:
                    planned = self.planned(kind, self.selected() if kind == "test" else None)
            except ProtocolError:
                lines += ["", "test: the candidate to test is chosen once every selection run is stored"]
                continue
            except (KeyError, ZeroDivisionError):  # a study that chooses by a rule of its own: what it tested
                planned = [(split, c, seed) for k, split, c, seed in stored if k == "test"]
            if not planned:
                continue
            cells: dict[tuple[str, str], dict[int, str]] = {}
            counts = {"stored": 0, "under way": 0, "missing": 0}
            for split, cand, seed in planned:
                record = stored.get((kind, split, cand, seed))
                fit = None
                if record is None and progress is not None:
                    fit = progress(p.candidates[cand], seed, kind, budget)
                counts["stored" if record else "under way" if fit else "missing"] += 1
                if fit is not None:
                    going.append(_under_way(f"{cand} seed {seed} ({kind})", fit, metric, now))
                cells.setdefault((split, cand), {})[seed] = _cell(record, fit, metric)
            seeds = sorted({seed for row in cells.values() for seed in row})
            lines += ["", f"{kind}: " + ", ".join(f"{n} {what}" for what, n in counts.items() if n or what == "stored")
                      + f" of {len(planned)} runs"]
            splits = len({split for split, _ in cells}) > 1
            rows = [["candidate", *(f"seed {s}" for s in seeds)]]
            rows += [[f"{split}/{cand}" if splits else cand, *(row.get(s, "") for s in seeds)]
                     for (split, cand), row in cells.items()]
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        if going:
            lines += ["", "under way (not stored yet):", *(f"  {g}" for g in going)]
        return lines

    def run(self, kind: str, shard: tuple[int, int] = (0, 1), argv: list[str] | None = None,
            candidates: list[str] | None = None, progress: bool = True) -> list[Record]:
        """Make the ``kind`` ("select" or "test") runs of the protocol missing from the store (the ``shard``
        (i, n) takes every n-th of them), saving the store after each; returns the new records."""
        if kind not in ("select", "test"):
            raise ValueError(f"kind must be 'select' or 'test', not {kind!r}")
        self.check()
        p = self.protocol
        if kind == "test" and candidates is None and p.per_split:
            planned = [k for s in p.splits if s.test
                       for k in self.planned(kind, self.selected(s.name)) if k[0] == s.name]
        else:
            if kind == "test" and candidates is None:
                candidates = self.selected()
            planned = self.planned(kind, candidates)
        todo = [k for k in planned if (kind, *k, p.hash) not in self.store.keys()]
        todo = todo[shard[0]::shard[1]]
        command = "python -m studies " + shlex.join(argv if argv is not None else sys.argv[1:])
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", "attnmm", "studies"))
        bar = _progress(todo, f"{self.name} {kind}", progress)
        new = []
        for split_name, cand, seed in bar:
            split = p.split(split_name)
            names = split.validation if kind == "select" else split.test
            sets = Sets(kind, {n: self.resolve(n) for n in names}, p,
                        self.store.select("select", p.hash) if kind == "test" else [])
            train_name = split.select_train if kind == "select" else split.train
            train = self.resolve(train_name) if train_name else None
            started, t0 = datetime.now(timezone.utc), time.perf_counter()
            out = self.module.run(p.candidates[cand], seed, train, sets, p.data.get("budget", {}))
            scores, detail = out if isinstance(out, tuple) else (out, None)
            extra = set(scores) - set(names)
            if extra:
                raise ProtocolError(f"a {kind} run returned scores of {sorted(extra)}, which it may not score")
            record: Record = {"kind": kind, "split": split_name, "candidate": cand, "seed": seed, "scores": scores,
                              "protocol": p.hash, "legacy": False, "command": command, "commit": commit,
                              "dirty": dirty, "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "seconds": round(time.perf_counter() - t0, 2)}
            if detail is not None:
                record["detail"] = detail
            if kind == "test" and p.retest[0]:
                record["exploratory"] = p.retest[1]
            items: dict[str, list[Any]] = {}
            if kind == "test":
                for n in names:
                    for k, v in self.resolve(n).as_json().items():
                        items[k] = sorted(set(items.get(k, [])) | set(v), key=str)
            self.store.add(record, p.data, items or None)
            self.store.save()
            new.append(record)
        return new


def _cell(record: Record | None, progress: dict[str, Any] | None, metric: str) -> str:
    """A planned run in the status table: its score (the first set's ``metric``), how far its fit has gone,
    or a dash."""
    if record is not None:
        first: dict[str, Any] = next(iter(record["scores"].values()), {})
        value = first.get(metric)
        return f"{value:.4g}" if isinstance(value, (int, float)) else "stored"
    if progress is None:
        return "-"
    if progress.get("finished"):
        return "fit done, not stored"
    return f"{progress['epochs']} of {progress.get('max_epochs') or '?'} epochs"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _under_way(name: str, progress: dict[str, Any], metric: str, now: float) -> str:
    """One line on a fit not stored yet: its epochs, best validation score so far, pace and time to go."""
    if progress.get("finished"):
        return f"{name}: its fit finished; run the same command again to store its record"
    planned = progress.get("max_epochs")
    text = f"{name}: {progress['epochs']} of {planned or '?'} epochs"
    if progress.get("best") is not None:
        text += f", best val {metric} {progress['best']:.4f} (epoch {progress['best_epoch']})"
    pace = progress.get("epoch_s")
    if pace:
        text += f", {pace:.0f} s an epoch"
        if planned:
            text += f", about {_duration(pace * max(planned - progress['epochs'], 0))} to go"
    text += f"; last written {_duration(max(now - progress['written'], 0))} ago"
    return text + (f" ({progress['run_dir']})" if progress.get("run_dir") else "")


def _progress(items: list[Any], desc: str, on: bool) -> Any:
    if not on:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="run")
