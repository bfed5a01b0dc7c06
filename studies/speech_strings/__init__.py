"""Connected digits under Full, Window and Chunk masks: the masks are the candidates, each trained at the
recipe's budget and tested on its test strings (:mod:`.measure` trains and measures, :mod:`.page` writes
the block of docs/recipes/speech.md)."""

from __future__ import annotations

import argparse
from typing import Any

from studies._runner import Items


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "test"}``: the recipe's strings of that part (FSDDStringsDataModule's speaker-disjoint
    draw of recordings; its test strings reuse the test recordings)."""
    return Items.of(spec, item=[f"fsdd_strings:{spec['part']}"])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """Train the recipe's model with the candidate's mask (test DER by the recipe's decoding)."""
    from studies.speech_strings import measure

    opts = argparse.Namespace(seed=seed, root=None, **budget)
    r = measure.train(opts, candidate["mask"])
    return {name: {"der": r["test_der"], "string_acc": r["test_string_acc"]} for name in evaluate}, r


def render(view: Any) -> list[str]:
    from studies.speech_strings.page import _models_section

    return _models_section(view.detail.get("models", {}))


def blocks(view: Any) -> dict[str, list[str]]:
    from studies.speech_strings.measure import unpack
    from studies.speech_strings.page import render_section

    return {"docs/recipes/speech.md#section": render_section(unpack(view.detail)).splitlines()}


def summary(view: Any) -> list[dict[str, Any]]:
    import statistics

    models = view.detail.get("models", {})
    out = []
    for mask in view.protocol.candidates:
        ders = [100 * m["test_der"] for k, m in models.items() if k.split(" (seed")[0] == mask]
        if not ders:
            continue
        spread = f"{statistics.fmean(ders):.2f} ± {statistics.stdev(ders):.2f}" if len(ders) > 1 else f"{ders[0]:.2f}"
        out.append({"task": "Speech: connected digits (CTC and attention decoder)", "dataset": "FSDD strings",
                    "split": "the recipe's speaker-disjoint strings", "metric": f"test DER (%), `{mask}`",
                    "result": f"{spread} ({len(ders)} seeds)", "anchors": "—", "order": 12})
    return out
