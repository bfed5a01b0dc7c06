"""Keyword spotting on speakers never heard (Speech Commands, 12 classes): the study of the keyword config.

Its code is :mod:`studies.kws.evaluate` (a checkpoint's test confusion matrix) and :mod:`studies.kws.cnn`
(the res8 peer); this module is what the study runner reads: the resolved speaker splits, the README's
results block and the rows of docs/results.md, from ``store.json`` (legacy records of both protocols).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from studies._runner import Items
from studies._runner.protocol import ProtocolError


@cache
def _split(folder: str, seed: int, val: float, test: float) -> dict[str, tuple[str, ...]]:
    import os

    from attnmm.data.speech_commands import scan_class_folders, split_speech_commands

    root = Path(os.environ.get("ATTNMM_DATA", Path.home() / ".cache" / "attnmm"))
    parts = split_speech_commands(scan_class_folders(root / folder), val, test, seed)
    return {k: tuple(sorted({c.speaker for c in v if c.speaker})) for k, v in parts.items()}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The speakers of one part of a speaker-disjoint split of the Speech Commands folder."""
    parts = _split(spec["speech_commands"], spec["split_seed"], spec["val_fraction"], spec["test_fraction"])
    return Items.of(spec, speaker=parts[spec["part"]])


def run(candidate: Any, seed: int, train: Items | None, evaluate: Any, budget: dict[str, Any]) -> Any:
    raise ProtocolError(
        "the runs of this study were made before the runner (python recipes/speech_truncated.py fit ... and "
        "python -m studies.kws.evaluate); a new protocol needs test speakers neither split has scored")


def _rows(view: Any, kind: str, h: str) -> list[dict[str, Any]]:
    return [r for r in view.records(kind) if r["protocol"] == h]


def render(view: Any) -> list[str]:
    from studies._runner.render import table

    out: list[str] = []
    protocols = sorted(view.store.data["protocols"].items(), key=lambda kv: kv[1]["number"])
    for h, p in protocols:
        split = next(iter(p["splits"]))
        out += [f"### Protocol {p['number']}: {p['title']} (`{h}`, {split})", ""]
        rows = []
        for r in _rows(view, "select", h):
            s = next(iter(r["scores"].values()))
            rows.append((r["candidate"] + (" (peer)" if r.get("role") == "peer" else ""),
                         f"{s['best_epoch']:.2f} (epoch {r['best_epoch']})", f"{s['average_best5']:.2f}",
                         "recovered from the page" if r.get("recovered_from") else ""))
        out += ["Selection (validation accuracy, %; no test number computed):", "",
                *table(["candidate", "best epoch", "average of the 5 best", "source"], rows), ""]
        rows = [(r["candidate"], f"{next(iter(r['scores'].values()))['accuracy']:.2f}", r["clips"],
                 "; ".join(r.get("flags", [])) or "") for r in _rows(view, "test", h)]
        out += ["Test (accuracy, %, 20 speakers never heard):", "",
                *table(["model", "test accuracy", "clips", "flags"], rows), ""]
    return out


def summary(view: Any) -> list[dict[str, Any]]:
    common = {"task": "Speech: keyword spotting (Speech Commands, 12 classes)", "dataset":
              "Speech Commands v0.02 test companion folder (197 speakers)", "metric": "accuracy (%)",
              "anchors": "KWT-3 98.56 ± 0.07 on the full v0.02, 12 classes, official split (Berg et al., Interspeech "
              "2021); not comparable: about 85,000 training clips there, about 3,100 here", "order": 15}
    out = []
    for r in view.records("test"):
        p = view.store.data["protocols"][r["protocol"]]
        split = next(iter(p["splits"]))
        acc = next(iter(r["scores"].values()))["accuracy"]
        note = "; partly exploratory (4 of 20 test speakers scored before)" if r.get("flags") else ""
        out.append({**common, "split": f"speaker-disjoint 80/10/10, {split.replace('split', 'seed ')} (20 test "
                    f"speakers, {r['clips']} clips)", "result": f"{r['candidate']}: {acc:.2f} (one run){note}"})
    return out
