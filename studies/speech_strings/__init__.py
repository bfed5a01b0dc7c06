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
