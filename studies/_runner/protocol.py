"""A study's protocol as data, its hash, and the checks the runner makes on it.

A protocol is ``studies/<name>/protocol.json``::

    {"question": "...",                     # prose (PROSE below): not hashed
     "rule": "...",
     "reconstructed": false,                # true: rebuilt from stores written before the runner
     "sets": {"train": {...}, "val": {...}, "test": {...}},   # each spec is read by the study's resolve()
     "splits": {"main": {"train": "train", "validation": ["val"], "test": ["test"]}},
     "candidates": {"small": {...}, "large": {...}},
     "seeds": {"select": [0], "test": [0, 1, 2]},
     "budget": {...},                       # passed to the study as is
     "select": {"metric": "accuracy", "mode": "max"},   # how the selection runs pick a candidate;
                                            # "per": "split": each split picks on its own "inner" sets
     "retest": {"protocols": ["<hash>"], "why": "..."},  # earlier protocols whose test items are scored again
     "test_candidates": "selected",         # "selected per split", or a list of candidate names
     "moved": {"recipes/configs/a.yaml": {"to": "studies/x/configs/a.yaml", "content": "<content_hash>",
                                          "rewritten": "..."}}}  # optional: why the content was rewritten

A split of a nested selection holds ``"inner": {"train": ..., "validation": [...]}``: its selection runs
train on the inner training set and score the inner validation sets, and the disjointness check holds per
split (inner validation and inner training data against that split's test sets; another split's test
data may be this split's validation data). Without ``splits`` the protocol's top-level
``train``/``validation``/``test`` form the one split ``main``.
Everything except the prose keys goes into the protocol's hash, so a test result knows which protocol
produced it. ``moved`` records a file the protocol names that moved since its runs (the protocol names the
new path): the hash counts it under its old path, and its results stay current while the file's content
(:func:`content_hash`, comments aside) is the one recorded at the move.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Keys of a protocol that are prose: editing them does not change what a run computes.
PROSE = ("question", "rule", "notes", "caveats", "title", "reconstructed", "task", "dataset", "split_protocol",
         "metric_name", "anchors", "order", "labels", "recipes", "paired", "amends",
         "tables", "summary")
#: The values of ``test_candidates`` that test the winner of the selection runs: one winner for the study,
#: or one per split (each split's winner on its own validation sets).
SELECTED = ("selected", "selected per split", "selected per fold")
#: Kinds of item a resolved set lists; two sets overlap when they share an item of any kind.
KINDS = ("recording", "speaker", "graph", "fold", "node", "item")


class ProtocolError(RuntimeError):
    """The runner refuses a run that would break the study's protocol."""


@dataclass(frozen=True)
class Items:
    """The concrete items of a resolved set: ids by kind (``{"speaker": {"george"}, "recording": {...}}``)
    and, in ``payload``, whatever the study needs to load them (file paths, index tensors...)."""

    ids: Mapping[str, frozenset[Any]]
    payload: Any = field(default=None, compare=False)

    @classmethod
    def of(cls, payload: Any = None, **ids: Iterable[Any]) -> Items:
        """``Items.of(paths, speaker=[...], recording=[...])``."""
        unknown = set(ids) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown item kinds {sorted(unknown)}; use some of {KINDS}")
        return cls({k: frozenset(v) for k, v in ids.items()}, payload)

    def shared(self, other: Items) -> dict[str, list[Any]]:
        """The ids of each kind both sets hold (empty when disjoint)."""
        out = {}
        for kind in set(self.ids) & set(other.ids):
            common = self.ids[kind] & other.ids[kind]
            if common:
                out[kind] = sorted(common, key=str)
        return out

    def as_json(self) -> dict[str, list[Any]]:
        return {k: sorted(v, key=str) for k, v in sorted(self.ids.items())}


@dataclass(frozen=True)
class Split:
    """One split: the test runs train on ``train`` and score ``test``; its selection runs train on
    ``inner_train`` (nested selection) or ``train``, and score ``validation``."""

    name: str
    train: str | None
    validation: tuple[str, ...]
    test: tuple[str, ...]
    inner_train: str | None = None

    @classmethod
    def of(cls, name: str, s: Mapping[str, Any]) -> Split:
        inner = s.get("inner", {})
        return cls(name, s.get("train"), tuple(inner.get("validation", s.get("validation", ()))),
                   tuple(s.get("test", ())), inner.get("train"))

    @property
    def select_train(self) -> str | None:
        return self.inner_train or self.train


class Protocol:
    """A loaded protocol: ``data`` is the JSON object, ``hash`` the digest of its non-prose keys."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = dict(data)
        self.hash = protocol_hash(self.data)
        sets = self.data.get("sets", {})
        splits = self.data.get("splits") or {
            "main": {k: self.data[k] for k in ("train", "validation", "test") if k in self.data}}
        self.splits = [Split.of(name, s) for name, s in splits.items()]
        chosen = self.data.get("test_candidates", "selected")
        if isinstance(chosen, str) and chosen not in SELECTED:
            raise ProtocolError(f"test_candidates must be a list of candidates or one of {SELECTED}, not {chosen!r}")
        unknown = [] if isinstance(chosen, str) else sorted(set(chosen) - set(self.candidates))
        if unknown:
            raise ProtocolError(f"test_candidates names {unknown}, which are not among the candidates "
                                f"{sorted(self.candidates)}")
        for split in self.splits:
            for name in filter(None, (split.train, split.inner_train, *split.validation, *split.test)):
                if name not in sets:
                    raise ProtocolError(f"split {split.name!r} names set {name!r}, which the protocol's "
                                        f"'sets' do not define (it defines {sorted(sets)})")

        retest = self.data.get("retest")
        if retest is not None and not (isinstance(retest, Mapping) and retest.get("protocols") and retest.get("why")):
            raise ProtocolError('retest must be {"protocols": [earlier hashes], "why": "..."}')

    @property
    def per_split(self) -> bool:
        """Each split selects on its own (inner) sets: ``"select": {"per": "split"}``; the disjointness check
        then holds per split and each split tests its own winner."""
        return self.data.get("select", {}).get("per") == "split" or self.data.get("test_candidates") in SELECTED[1:]

    @property
    def retest(self) -> tuple[list[str], str]:
        """The earlier protocols whose test items this one scores again, and why: its results are exploratory."""
        r = self.data.get("retest") or {}
        return list(r.get("protocols", [])), r.get("why", "")

    @property
    def reconstructed(self) -> bool:
        return bool(self.data.get("reconstructed"))

    @property
    def candidates(self) -> dict[str, Any]:
        return dict(self.data.get("candidates", {}))

    def seeds(self, kind: str) -> list[int]:
        seeds = self.data.get("seeds", [0])
        return list(seeds[kind] if isinstance(seeds, Mapping) else seeds)

    def spec(self, name: str) -> Any:
        return self.data["sets"][name]

    @property
    def validation_sets(self) -> list[str]:
        return sorted({v for s in self.splits for v in s.validation})

    @property
    def test_sets(self) -> list[str]:
        return sorted({t for s in self.splits for t in s.test})

    def split(self, name: str) -> Split:
        for s in self.splits:
            if s.name == name:
                return s
        raise KeyError(f"no split {name!r}; the protocol has {[s.name for s in self.splits]}")


def protocol_hash(data: Mapping[str, Any]) -> str:
    """The first 12 hex digits of the SHA-256 of the protocol's non-prose keys as canonical JSON. A file the
    protocol names that has ``moved`` since counts under its old path: a move alone changes no run."""
    back = {m["to"]: old for old, m in data.get("moved", {}).items()}
    kept = _swap({k: v for k, v in data.items() if k not in PROSE and k != "moved"}, back)
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _swap(value: Any, paths: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return paths.get(value, value)
    if isinstance(value, Mapping):
        return {k: _swap(v, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, paths) for v in value]
    return value


def content_hash(path: Path) -> str:
    """The SHA-256 (12 hex digits) of a config's content: its parsed YAML or JSON, comments and layout aside."""
    import yaml

    parsed = yaml.safe_load(path.read_text())
    text = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def moved_edits(data: Mapping[str, Any], root: Path) -> list[str]:
    """The moved files (``"moved": {old path: {"to": new path, "content": content_hash}}``) whose content is
    no longer the one recorded at the move: a result under the protocol is stale then."""
    return [m["to"] for m in data.get("moved", {}).values()
            if not (root / m["to"]).exists() or content_hash(root / m["to"]) != m["content"]]


def check_disjoint(validation: Mapping[str, Items], test: Mapping[str, Items], role: str = "validation") -> None:
    """Refuse when any ``role`` (validation) set shares an item of any kind with any test set."""
    clashes = []
    for v, vi in validation.items():
        for t, ti in test.items():
            for kind, ids in vi.shared(ti).items():
                shown = ", ".join(map(str, ids[:5])) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
                clashes.append(f"{role} set {v!r} shares {len(ids)} {kind}(s) with test set {t!r}: {shown}")
    if clashes:
        raise ProtocolError("selection refused, its validation data overlaps the study's test data:\n  "
                            + "\n  ".join(clashes) + "\nDraw the validation sets from the training data only.")


def check_unscored(test: Mapping[str, Items], scored: Mapping[str, Mapping[str, list[Any]]], current: str,
                   retest: Iterable[str] = ()) -> None:
    """Refuse a protocol (hash ``current``) whose test sets hold an item another protocol already scored,
    unless the protocol names that one in ``retest`` (its results are then exploratory).

    ``scored`` maps a protocol hash to the items its test results were measured on."""
    for h, ids in scored.items():
        if h == current or h in retest:
            continue
        old = Items({k: frozenset(v) for k, v in ids.items()})
        for t, ti in test.items():
            shared = ti.shared(old)
            if shared:
                kinds = ", ".join(f"{len(v)} {k}(s)" for k, v in shared.items())
                raise ProtocolError(
                    f"protocol {current} was written after protocol {h} scored its test sets, and its test set "
                    f"{t!r} shares {kinds} with them (e.g. {next(iter(shared.values()))[:3]}). A new protocol must "
                    "test on data the study has never scored: name a fresh test set, restore the old protocol, or name "
                    "the old one under 'retest' (its results are then exploratory).")
