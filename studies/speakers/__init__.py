"""Unseen speakers (FSDD, leave one speaker out): the study of the speech recipe's default on new voices.

Protocols 1-3 were run by :mod:`studies.speakers.loso` (legacy records); protocol 4 (``protocol.json``) is a
nested selection the runner runs: ``python -m studies speakers select`` trains each candidate on a fold's
inner training speakers and scores its inner validation speaker, ``python -m studies speakers test`` trains
each fold's winner on the fold's four training speakers and scores the held-out one.
"""

from __future__ import annotations

import csv
import statistics
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


def run(candidate: list[str], seed: int, train: Items, evaluate: Any, budget: dict[str, Any],
        config: str = "recipes/configs/speech_truncated.yaml") -> Any:
    """``recipes/speech_truncated.py fit`` on ``train``'s speakers: a selection run holds out every other speaker
    and validates on its validation speaker (no test number: ``--test_after_fit=false``); a test run validates
    on a draw of the training takes and tests the held-out speaker. A ``budget`` object may cap the epochs
    and add arguments (a small run)."""
    (name,) = evaluate
    scored = sorted(evaluate[name].ids["speaker"])
    budget = budget if isinstance(budget, dict) else {}  # the protocol's budget is the config's own
    args = [f"--config={ROOT / config}", *candidate, *budget.get("args", [])]
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


def _number(view: Any, h: str) -> int:
    return int(view.store.data["protocols"][h]["number"])


def _value(r: dict[str, Any]) -> float:
    return next(iter(next(iter(r["scores"].values())).values()))


def _ms(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "—"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def nested_rows(view: Any) -> tuple[list[tuple[Any, ...]], list[float]]:
    """Protocol 4, fold by fold: each candidate's selection score, the choice, and the chosen one's test."""
    h = view.protocol.hash
    sel = {(r["split"], r["candidate"]): _value(r) for r in view.records("select") if r["protocol"] == h}
    test = {r["split"]: r for r in view.records("test") if r["protocol"] == h}
    cands = list(view.protocol.candidates)
    rows, tests = [], []
    for fold in SPEAKERS:
        val = view.protocol.data["sets"][f"val_sel_{fold}"]["fsdd"]["speakers"][0]
        scores = [sel.get((fold, c)) for c in cands]
        done = all(s is not None for s in scores)
        choice = max(cands, key=lambda c: (sel[(fold, c)], -cands.index(c))) if done else "—"
        t = test.get(fold)
        if t is not None:
            tests.append(_value(t))
        rows.append((fold, val, *(f"{s:.2f}" if s is not None else "—" for s in scores), choice,
                     f"{t.get('detail', t)['val_draw']:.2f}" if t else "—", f"{_value(t):.2f}" if t else "—"))
    return rows, tests


def render(view: Any) -> list[str]:
    from studies._runner.render import table

    rows, tests = nested_rows(view)
    cands = list(view.protocol.candidates)
    out = ["### Protocol 4: chosen per fold on that fold's training speakers", "",
           "Accuracy (%). Selection: best validation accuracy on the validation speaker (no test number computed); "
           "test: the fold's chosen candidate trained on the four other speakers (its checkpoint chosen on a 10% "
           "draw of their takes), on all 500 takes of the held-out speaker.", "",
           *table(["held-out speaker", "validation speaker", *(f"{c} (validation)" for c in cands), "chosen",
                   "validation (draw)", "test"], rows), "",
           f"Test accuracy over the folds done ({len(tests)} of {len(SPEAKERS)}): **{_ms(tests)}**"
           + ("" if len(tests) == len(SPEAKERS) else " (incomplete: the remaining folds had not run)") + ".", "",
           f"- {view.protocol.data['caveats'][0]}", ""]
    out += ["### Protocols 1-3 (exploratory: their selection validated on the test speakers)", ""]
    groups: dict[tuple[int, str, str], dict[str, float]] = {}
    for r in view.records("test"):
        n = _number(view, r["protocol"])
        if n == 4:
            continue
        how = "trained on four" if r["split"].startswith("four_") else "trained on three"
        groups.setdefault((n, r["candidate"], how), {})[r["split"].split("_", 1)[1]] = _value(r)
    rows = [(n, c, how, *(f"{v[s]:.1f}" if s in v else "—" for s in SPEAKERS),
             _ms([v[s] for s in SPEAKERS if s in v])) for (n, c, how), v in sorted(groups.items())]
    out += ["Test accuracy (%; the strings rows: digit error rate, %) per held-out speaker:", "",
            *table(["protocol", "candidate", "training", *SPEAKERS, "mean ± std"], rows), ""]
    return out


def summary(view: Any) -> list[dict[str, Any]]:
    _, tests = nested_rows(view)
    done = len(tests) == len(SPEAKERS)
    p3 = [_value(r) for r in view.records("test") if _number(view, r["protocol"]) == 3]
    common = {"task": "Speech: spoken digits on unseen speakers", "dataset": "FSDD (5 speakers)",
              "metric": "accuracy (%)", "anchors": "—", "order": 12}
    return [
        {**common, "split": "leave one speaker out; each fold's choice on its own training speakers",
         "result": (f"{_ms(tests)} (5 folds)" if done else f"{_ms(tests)} ({len(tests)} of 5 folds; incomplete)")
         + "; exploratory (test speakers scored before)"},
        {**common, "split": "leave one speaker out; one choice validated on the other folds' test speakers",
         "result": f"{_ms(p3)} (5 folds); exploratory"},
    ]
