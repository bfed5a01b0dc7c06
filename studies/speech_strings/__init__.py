"""Connected digits under Full, Window and Chunk masks: the masks are the candidates, each trained at the recipe's
budget and tested on its test strings (:mod:`.measure` trains and decodes, ``page.md`` writes the study's block of
docs/recipes/speech.md from the store, with the names :func:`context` adds)."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

from studies._runner import Items
from studies._runner.stats import mean_std, ratio_bootstrap

CONFIG = Path(__file__).resolve().parents[2] / "recipes" / "configs" / "speech_truncated_strings.yaml"


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "test"}``: the recipe's strings of that part (FSDDStringsDataModule's speaker-disjoint draw of
    recordings; its test strings reuse the test recordings)."""
    return Items.of(spec, item=[f"fsdd_strings:{spec['part']}"])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    """Train the recipe's model with the candidate's mask (test DER by the recipe's decoding)."""
    from studies.speech_strings import measure

    r = measure.train(argparse.Namespace(seed=seed, root=None, **budget), candidate["mask"])
    return {name: {"der": r["test_der"], "string_acc": r["test_string_acc"]} for name in evaluate}, r


def _takes(detail: dict[str, Any]) -> Any:
    for model in detail.get("models", {}).values():
        for row in model.get("der", []):
            for where in (row, row.get("recipe", {})):
                if "per_take" in where:
                    yield row["length"], where["per_take"]


def pack(detail: dict[str, Any]) -> dict[str, Any]:
    """The detail with each length's test recordings and their digit counts kept once (``takes``), every decoding's
    ``per_take`` holding only its errors (a decoding of other recordings keeps its own lists)."""
    out = copy.deepcopy(detail)
    takes = out.setdefault("takes", {})
    for length, per_take in _takes(out):
        shared = takes.setdefault(str(length), {"ids": per_take["ids"], "digits": per_take["digits"]})
        if "ids" in per_take and (per_take["ids"], per_take["digits"]) == (shared["ids"], shared["digits"]):
            del per_take["ids"], per_take["digits"]
    return out


def unpack(detail: dict[str, Any]) -> dict[str, Any]:
    """The detail as :func:`pack` took it: every ``per_take`` with its recordings and digit counts."""
    out = copy.deepcopy(detail)
    for length, per_take in _takes(out):
        if "ids" not in per_take:
            per_take.update(out["takes"][str(length)])
    out.pop("takes", None)
    return out


def context(detail: dict[str, Any], view: Any = None) -> dict[str, Any]:
    """The page's names beyond the store: the recipe's config, the DER table (mean ± std over a mask's seeds per
    length and decoding, and its difference from Full's with a 95% bootstrap interval over the test recordings)."""
    import yaml

    models = detail.get("models", {})
    runs: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
    for key, model in models.items():
        for d in model.get("der", []):
            for decoding, r in (("greedy", d), (d.get("recipe", {}).get("decoding"), d.get("recipe"))):
                if r is not None:
                    runs.setdefault((key.split(" (seed ")[0], decoding), {}).setdefault(d["length"], []).append(r)
    lengths = sorted({n for by in runs.values() for n in by})

    def versus_full(mask: str, decoding: str, n: int) -> str:
        a, b = runs[(mask, decoding)].get(n, []), runs.get(("Full", decoding), {}).get(n, [])
        if mask == "Full" or not a or not b or not all("per_take" in r for r in a + b):
            return "—"
        diff, lo, hi = ratio_bootstrap([r["per_take"] for r in a], [r["per_take"] for r in b])
        return f"{100 * diff:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}]"

    der = [{"mask": m, "decoding": dec, "seeds": len(next(iter(by.values()))),
            "der": [mean_std([r["der"] for r in by.get(n, [])], 100, 2) for n in lengths],
            "vs_full": [versus_full(m, dec, n) for n in lengths]}
           for (m, dec), by in sorted(runs.items(), key=lambda kv: (kv[0][0] != "Full", *kv[0], kv[0][1] != "greedy"))]
    return {"recipe": yaml.safe_load(CONFIG.read_text()), "lengths": lengths, "der": der}
