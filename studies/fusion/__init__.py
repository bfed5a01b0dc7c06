"""Fusion you can trust (audio-visual digits): the study of the multimodal recipe's default.

Its runs and their evaluation under every condition are :mod:`studies.fusion.conditions`; this module is
what the study runner reads: the resolved sets (FSDD recordings by speaker and take), the README's
results block and the rows of docs/results.md, from ``store.json`` (legacy records of the four
protocols, imported from ``stores/``). The multimodal recipe page's conditions table is rendered from the
last draw's rich store by ``python -m studies.fusion.conditions render``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studies._runner import Items
from studies._runner.protocol import ProtocolError

HERE = Path(__file__).resolve().parent
HELD = "held-out speaker"


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The FSDD recordings of ``spec["fsdd"]`` (speakers and an inclusive range of takes), ten digits each;
    the held-out gate voices (``gate_voices``) as their Speech Commands speakers."""
    if "fsdd" in spec:
        fsdd = spec["fsdd"]
        first, last = fsdd["takes"]
        recordings = [f"{d}_{s}_{t}" for s in fsdd["speakers"] for d in range(10) for t in range(first, last + 1)]
        return Items.of(recordings, speaker=fsdd["speakers"], recording=recordings)
    if "gate_voices" in spec:  # Speech Commands speakers: no FSDD speaker or recording
        return Items.of(spec, item=[f"speech_commands:{spec['gate_voices']}:held-out"])
    raise ValueError(f"unknown set spec {spec}")


def run(candidate: Any, seed: int, train: Items | None, evaluate: Any, budget: dict[str, Any]) -> Any:
    raise ProtocolError(
        "every FSDD test recording of this study is scored (store.json's 'scored'): a new protocol needs "
        "recordings FSDD does not have. The legacy runs are reproduced by python -m studies.fusion.conditions.")


def _protocols(view: Any) -> list[tuple[int, str, dict[str, Any]]]:
    found = [(int(p["number"]), h, p) for h, p in view.store.data["protocols"].items()]
    return sorted(found)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render(view: Any) -> list[str]:
    """Per protocol: the selection's validation means and, on its test draw, each model's accuracy per
    condition (mean ± std over the seeds; the held-out speaker over the 5 folds), with the flags."""
    from studies._runner.render import table

    out: list[str] = []
    detail = view.store.data.get("detail", {})
    for number, h, p in _protocols(view):
        d = detail[str(number)]
        out += [f"### Protocol {number}: {p['title']} (`{h}`, test seed {d['test_seed']})", ""]
        sel = [r for r in view.records("select") if r["protocol"] == h]
        if sel:
            rows = [(r["candidate"] + (" (combine)" if r.get("stage") == "combine" else ""), _pct(r["mean"]),
                     r.get("stored_from") or "") for r in sel]
            out += ["Selection (validation conditions only; mean accuracy, %):", "",
                    *table(["candidate", "validation mean", "scores from"], rows), ""]
        acc = d["accuracy"]
        conds = [*p["test_conditions"]]
        rows = []
        for model in ("fused", "audio", "image", "ensemble"):
            cells = [f"{acc[model][c]['mean']:.2f} ± {acc[model][c]['std']:.2f}" if c in acc[model] else "—"
                     for c in conds]
            rows.append((model, *cells))
        header = ["model", *[c + (" (exploratory)" if c == HELD else "") for c in conds]]
        out += ["Test accuracy (%), mean ± std over 3 seeds (held-out speaker: over 5 folds):", "",
                *table(header, rows), ""]
        out += [f"- {c}" for c in p.get("caveats", [])] + [""]
    return out


def summary(view: Any) -> list[dict[str, Any]]:
    """docs/results.md's rows: the chosen model on FSDD's own test takes, and the held-out speaker (exploratory)."""
    number, _, p = _protocols(view)[-1]
    acc = view.store.data["detail"][str(number)]["accuracy"]["fused"]
    common = {"task": "Multimodal: audio-visual digits (FSDD + MNIST)", "dataset": "FSDD recordings paired with "
              "MNIST images", "metric": "accuracy (%)", "anchors": "—", "order": 60}
    return [
        {**common, "split": f"FSDD's takes 0-4 (250 recordings x 4 images, test seed {p['test']['test_seed']}), "
         "clean", "result": f"{acc['clean']['mean']:.2f} ± {acc['clean']['std']:.2f} (3 seeds)"},
        {**common, "split": "held-out speaker, leave one of 5 out (clean images)",
         "result": f"{acc[HELD]['mean']:.2f} ± {acc[HELD]['std']:.2f} (5 folds); exploratory: selection saw test "
         "recordings"},
    ]
