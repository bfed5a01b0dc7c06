"""Fusion you can trust (audio-visual digits): the study of the multimodal recipe's default.

Every run of its four protocols was made before the runner (legacy records in ``store.json``, the last draw's
per-pair results in ``stores/fusion_conditions.json``); every FSDD test recording is scored, so the study runs
nothing more. The README's results block and the rows of docs/results.md are the protocol's ``tables`` and
``summary``; page.md writes the conditions section of docs/recipes/multimodal.md (its names from
:func:`context`) and :func:`figure` its figure (``docs/make_figures.py fusion_conditions``), both from the last
draw's store.
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


#: Where a candidate's config is, when not an overlay of the multimodal recipe's default (``configs/NAME.yaml``).
_SHOWN = {"robust_conflict": "`recipes/multimodal_digits.py`'s default config",
          "default": "`studies/fusion/legacy_recipe.py`'s default config"}


def context(detail: dict[str, Any], view: Any) -> dict[str, Any]:
    """The names of the conditions section (page.md): the last draw's store, the chosen config and where it is,
    the conditions (the held-out speaker last), the targets ``t`` and those missed, and the gate's mean weights."""
    store = json.loads(STORE.read_text())
    choice = (store.get("selection") or {}).get("choice", "?")
    conds = [*store["conditions"], store["held_out"]]
    t = store["summary"]["targets"]
    fused = store["cells"]["fused"]
    alphas = {c: np.mean(fused[c]["alpha"], 0).tolist() for c in conds if fused[c].get("alpha")}
    return {**store, "choice": choice, "conds": conds, "models": MODELS, "t": t, "alphas": alphas,
            "shown": _SHOWN.get(choice, f"`recipes/multimodal_digits.py` with `studies/fusion/configs/{choice}.yaml`"),
            "combine": _COMBINE_WORDS[store.get("combine", "logits")],
            "missed": [(c, v) for c, v in t["never_worse"].items() if not v["met"]],
            "gate": ["audio", "image", "fusion"][: len(next(iter(alphas.values()), []))]}


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
