"""A study's store: every selection and test run it made, with how and under which protocol.

``studies/<name>/store.json``::

    {"study": "name",
     "protocols": {"<hash>": {...protocol...}},       # every protocol a run was made under
     "scored": {"<hash>": {"speaker": [...], ...}},    # the test items each protocol's test runs measured
     "records": [
       {"kind": "select" | "test", "split": "main", "candidate": "small", "seed": 0,
        "scores": {"<set>": {"accuracy": 0.93, ...}},  # validation sets for select, test sets for test
        "detail": {...},                               # optional, what the study's pages need beyond scores
        "protocol": "<hash>", "legacy": false,
        "command": "python -m studies name select", "commit": "8c6f76c", "dirty": false,
        "started": "2026-12-03T16:00:00Z", "seconds": 12.3}]}

A record is identified by (kind, split, candidate, seed, protocol): a run whose record exists is skipped
(resume), and :func:`merge` joins stores written by parts of a run on other machines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def key(r: Record) -> tuple[str, str, str, int, str]:
    return (r["kind"], r["split"], r["candidate"], int(r["seed"]), r["protocol"])


class Store:
    """The records of one study, loaded from and saved to ``path``."""

    def __init__(self, path: Path, study: str):
        self.path = Path(path)
        self.data: dict[str, Any] = {"study": study, "protocols": {}, "scored": {}, "records": []}
        if self.path.exists():
            self.data.update(json.loads(self.path.read_text()))

    @property
    def records(self) -> list[Record]:
        return self.data["records"]

    @property
    def scored(self) -> dict[str, dict[str, list[Any]]]:
        return self.data["scored"]

    def keys(self) -> set[tuple[str, str, str, int, str]]:
        return {key(r) for r in self.records}

    def add(self, record: Record, protocol: dict[str, Any] | None = None,
            test_items: dict[str, list[Any]] | None = None) -> None:
        """Add ``record`` (replacing none: a second record of the same run is refused), remembering its
        protocol and, for a test record, the items it was scored on."""
        if key(record) in self.keys():
            raise ValueError(f"the store already holds the run {key(record)}")
        self.records.append(record)
        if protocol is not None:
            self.data["protocols"].setdefault(record["protocol"], protocol)
        if test_items:
            seen = self.scored.setdefault(record["protocol"], {})
            for kind, ids in test_items.items():
                seen[kind] = sorted(set(seen.get(kind, [])) | set(ids), key=str)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records.sort(key=lambda r: (r["kind"] != "select", r["split"], r["candidate"], int(r["seed"])))
        self.path.write_text(dumps(self.data) + "\n")

    def select(self, kind: str, protocol: str | None = None) -> list[Record]:
        return [r for r in self.records if r["kind"] == kind and (protocol is None or r["protocol"] == protocol)]

    def merge(self, others: Iterable[Store]) -> int:
        """Join the records of ``others`` into this store, and the parts of their ``detail`` (a measurement
        made elsewhere, on a GPU say); returns how many records and parts were new. Two records of the same
        run with different scores are refused, and so are two different parts of one name: the stores
        disagree."""
        mine = {key(r): r for r in self.records}
        added = 0
        others = list(others)
        for other in others:
            for name, part in other.data.get("detail", {}).items():
                detail = self.data.setdefault("detail", {})
                if name not in detail:
                    detail[name] = part
                    added += 1
                elif detail[name] != part:
                    raise ValueError(f"{other.path} and {self.path} hold different detail parts {name!r}: remove "
                                     f"one of them to keep the other")
        for other in others:
            if other.data.get("study") != self.data.get("study"):
                raise ValueError(f"{other.path} holds study {other.data.get('study')!r}, not {self.data['study']!r}")
            for h, p in other.data["protocols"].items():
                self.data["protocols"].setdefault(h, p)
            for h, ids in other.scored.items():
                seen = self.scored.setdefault(h, {})
                for kind, v in ids.items():
                    seen[kind] = sorted(set(seen.get(kind, [])) | set(v), key=str)
            for r in other.records:
                k = key(r)
                if k in mine:
                    if mine[k]["scores"] != r["scores"]:
                        raise ValueError(f"{other.path} and {self.path} disagree on the run {k}")
                    continue
                mine[k] = r
                self.records.append(r)
                added += 1
        return added


def dumps(value: Any, indent: str = "") -> str:
    """``value`` as JSON, one key per line, but a list of plain values, or a short object of them, on one line
    (stores hold long lists of per-item numbers)."""
    if not isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    children = list(value.values()) if isinstance(value, dict) else value
    flat = all(not isinstance(v, (dict, list)) for v in children)
    if flat and (isinstance(value, list) or len(json.dumps(value, ensure_ascii=False)) < 100):
        return json.dumps(value, ensure_ascii=False)
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
