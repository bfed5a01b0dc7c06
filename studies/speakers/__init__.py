"""Unseen speakers (FSDD, leave one speaker out): the study of the speech recipe's default on new voices.

Protocols 1-3 are legacy records (each with its ``run_command``); protocol 4 (``protocol.json``) is a
nested selection the runner runs: ``python -m studies speakers select`` trains each candidate on a fold's
inner training speakers and scores its inner validation speaker, ``python -m studies speakers test`` trains
each fold's winner on the fold's four training speakers and scores the held-out one.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from benchmarks._recipe_runs import run_fit
from studies._runner import Items

SPEAKERS = ("george", "jackson", "lucas", "theo", "yweweler")
ROOT = Path(__file__).resolve().parents[2]


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The FSDD recordings of ``spec["fsdd"]``: its speakers' takes in an inclusive range, ten digits each."""
    fsdd = spec["fsdd"]
    first, last = fsdd["takes"]
    recordings = [f"{d}_{s}_{t}" for s in fsdd["speakers"] for d in range(10) for t in range(first, last + 1)]
    return Items.of(recordings, speaker=fsdd["speakers"], recording=recordings)


def _best_val(run_dir: Path) -> dict[str, float]:
    values = [float(row["val_acc"]) for path in run_dir.parent.glob("**/metrics.csv")
              for row in csv.DictReader(path.open()) if row.get("val_acc")]
    return {"best_val_acc": max(values)}


def run(candidate: list[str], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """``recipes/speech_truncated.py fit`` on ``train``'s speakers: a selection run holds out every other speaker
    and validates on its validation speaker (no test number: ``--test_after_fit=false``); a test run validates
    on a draw of the training takes and tests the held-out speaker. A ``budget`` object may cap the epochs
    and add arguments (a small run)."""
    (name,) = evaluate
    scored = sorted(evaluate[name].ids["speaker"])
    budget = budget if isinstance(budget, dict) else {}  # the protocol's budget is the config's own
    args = [f"--config={ROOT / 'recipes/configs/speech_truncated.yaml'}", *candidate, *budget.get("args", [])]
    if evaluate.kind == "select":
        out = [s for s in SPEAKERS if s not in train.ids["speaker"] and s not in scored]
        args += [f"--data.test_speakers=[{','.join(out)}]", f"--data.val_speakers=[{','.join(scored)}]",
                 "--test_after_fit=false"]
    else:
        args += [f"--data.test_speakers=[{','.join(scored)}]"]
    metrics = run_fit("speech_truncated", args, budget.get("epochs"), seed, _best_val)
    val = round(100 * metrics["best_val_acc"], 2)
    if evaluate.kind == "select":
        return {name: {"accuracy": val}}
    return {name: {"accuracy": round(100 * metrics["test_acc"], 2)}}, {"val_draw": val}
