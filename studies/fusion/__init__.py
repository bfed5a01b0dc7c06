"""Fusion you can trust (audio-visual digits): the study of the multimodal recipe's default.

Every run of its four protocols was made before the runner (legacy records in ``store.json``, the last draw's
per-pair results in ``stores/fusion_conditions.json``); every FSDD test recording is scored, so the study runs
nothing more. The README's results block and the rows of docs/results.md are the protocol's ``tables`` and
``summary``; :func:`blocks` writes the conditions section of docs/recipes/multimodal.md and :func:`figure` its
figure (``docs/make_figures.py fusion_conditions``), both from the last draw's store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from studies._runner import Items
from studies._runner.protocol import ProtocolError
from studies.speakers import resolve as resolve_fsdd

STORE = Path(__file__).with_name("stores") / "fusion_conditions.json"
MODELS = ("fused", "audio", "image", "ensemble")
_COMBINE_WORDS = {"logits": "logits under its gate", "probabilities": "probabilities under its gate",
                  "average": "probabilities with equal weights"}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The FSDD recordings of ``spec["fsdd"]`` (speakers and an inclusive range of takes), ten digits each;
    the held-out gate voices (``gate_voices``) as their Speech Commands speakers."""
    if "gate_voices" in spec:  # Speech Commands speakers: no FSDD speaker or recording
        return Items.of(spec, item=[f"speech_commands:{spec['gate_voices']}:held-out"])
    return resolve_fsdd(spec, protocol)


def run(candidate: Any, seed: int, train: Items | None, evaluate: Any, budget: dict[str, Any]) -> Any:
    raise ProtocolError("every FSDD test recording of this study is scored (store.json's 'scored'): a new protocol "
                        "needs recordings FSDD does not have")


def _cell(a: dict[str, Any] | None) -> str:
    return "—" if a is None else f"{a['mean']:.2f} ± {a['std']:.2f}"


def _diff(d: dict[str, Any] | None) -> str:
    return "—" if d is None else f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"


#: Where a candidate's config is, when not an overlay of the multimodal recipe's default (``configs/NAME.yaml``).
_SHOWN = {"robust_conflict": "`recipes/multimodal_digits.py`'s default config",
          "default": "`studies/fusion/legacy_recipe.py`'s default config"}


def section(store: dict[str, Any]) -> list[str]:
    """The conditions section of docs/recipes/multimodal.md: the table, the targets and the gate's weights."""
    s, held = store["summary"], store["held_out"]
    acc, versus, t = s["accuracy"], s["fused_minus"], s["targets"]
    choice = (store.get("selection") or {}).get("choice", "?")
    shown = _SHOWN.get(choice, f"`recipes/multimodal_digits.py` with `studies/fusion/configs/{choice}.yaml`")
    conds = [*store["conditions"], held]
    lines = [
        "", "## Fusion under every condition", "",
        f"The fused model chosen on validation (`{choice}`: {shown}, its head averaging the "
        f"segments' {_COMBINE_WORDS[store.get('combine', 'logits')]}) against audio only, image "
        "only and their late ensemble (the mean of the two models' probabilities; with a modality missing, the "
        f"present one's), on one test draw (test seed {store['test_seed']}: 1,000 pairs, each test recording "
        f"paired with {store['test_pairs']['own']} MNIST test images; the held-out-speaker rows: 1,000 pairs of "
        "each fold's speaker, never trained on, with clean images). The test recordings are the same in every "
        "draw of the study (FSDD's takes 0-4; a draw changes the image pairing and the noise), and earlier "
        "protocols' test numbers on them were seen before this one was written. Accuracy (%), mean ± std over "
        "3 training seeds (the held-out speaker: over the 5 folds, one seed each); the differences are the fused "
        "model's, with a 95% paired bootstrap interval over the test pairs. The protocols, the earlier draws' numbers "
        "and the caveats are in [the fusion study](../../studies/fusion/README.md).", "",
        f"**{held.capitalize()} (exploratory: selection saw test recordings).** The held-out-speaker "
        "row reuses the same five FSDD speakers' recordings in every protocol (a new test seed changes only the "
        "image pairing and the noise); the fourth protocol was designed from george's fold of an earlier draw "
        "and tested on the same recordings; and the validation speaker jackson's takes 5-49 are 450 of the 500 "
        "recordings of jackson's test fold. The other rows are FSDD's test takes 0-4, never used in selection.", "",
        "| condition | fused | audio only | image only | late ensemble | fused − audio | fused − image "
        "| fused − ensemble |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {c}{' (exploratory)' if c == held else ''} | **{_cell(acc['fused'].get(c))}** | "
              + " | ".join(_cell(acc[m].get(c)) for m in MODELS[1:]) + " | "
              + " | ".join(_diff(versus[c].get(m)) for m in MODELS[1:]) + " |" for c in conds]
    missed = [f"{c} ({v['margin']:+.2f} against {v['best_peer']})" for c, v in t["never_worse"].items() if not v["met"]]
    w, wb = t["worth_it_average"], t["worth_it_both_corrupted"]

    def met(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    lines += [
        "", "![accuracy per condition](../figures/fusion_conditions.png)", "", "Targets:", "",
        f"- never worse (fused >= the best peer − 1 point on every condition): {met(t['never_worse_met'])}"
        + ("" if not missed else f"; missed on {', '.join(missed)}") + ";",
        f"- worth it, on average over the conditions with both modalities: fused − late ensemble = {w['gain']:+.2f} "
        f"points (1 needed): {met(w['met'])};",
        f"- worth it when both are corrupted: fused − {wb['better_single']} only = {wb['gain']:+.2f} points "
        f"(5 needed; interval {_diff(wb['interval'])}): {met(wb['met'])};",
        f"- clean accuracy {t['clean']['fused']:.2f}% (99.5 needed): {met(t['clean']['met'])};",
        f"- the longest training {t['training_minutes']['max']:.1f} min on one thread (15 allowed): "
        f"{met(t['training_minutes']['met'])}.",
    ]
    alphas = {c: store["cells"]["fused"][c]["alpha"] for c in conds if store["cells"]["fused"][c].get("alpha")}
    if alphas:
        names = ["audio", "image", "fusion"][: len(next(iter(alphas.values()))[0])]
        lines += ["", "The gate's mean weights (" + ", ".join(names) + ") per condition, over the replicates: "
                  + "; ".join(f"{c}: " + "/".join(f"{x:.2f}" for x in np.mean(v, 0)) for c, v in alphas.items()) + "."]
    return lines


def blocks(view: Any) -> dict[str, list[str]]:
    return {"docs/recipes/multimodal.md#conditions": section(json.loads(STORE.read_text()))}


def figure(store: dict[str, Any]) -> Any:
    """Accuracy per condition, one line per model (mean over the replicates, the std as a band)."""
    from matplotlib.figure import Figure

    acc = store["summary"]["accuracy"]
    conds = [*store["conditions"], store["held_out"]]
    fig = Figure(figsize=(9.6, 4.0), layout="constrained")
    ax = fig.subplots()
    labels = {"fused": "fused (chosen)", "audio": "audio only", "image": "image only", "ensemble": "late ensemble"}
    for m in MODELS:
        xs = [i for i, c in enumerate(conds) if c in acc[m]]
        mean = np.array([acc[m][conds[i]]["mean"] for i in xs])
        std = np.array([acc[m][conds[i]]["std"] for i in xs])
        ax.plot(xs, mean, marker="o", label=labels[m], linewidth=2.2 if m == "fused" else 1.2)
        ax.fill_between(xs, mean - std, mean + std, alpha=0.15)
    ax.set_xticks(range(len(conds)), conds, rotation=30, ha="right")
    ax.set(ylabel="test accuracy (%)", ylim=(0, 101))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    return fig
