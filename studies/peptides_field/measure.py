"""Measurements of the Peptides field study (``python -m studies peptides_field measure PART``):

- ``parameters``: each recipe candidate's model built from its configs (no training): its parameters in
  all and by part (adapter, encoder, head), against the field's budget of 500k.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from studies.peptides_field import FOLDER, ROOT

OPTIONS: dict[str, Any] = {}


def build(configs: list[str]) -> Any:
    """The recipe's task module built from ``configs`` (paths from the repository), untrained."""
    spec = importlib.util.spec_from_file_location("_graph_graph_recipe", ROOT / "recipes" / "graph_graph.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    args = [a for c in configs for a in ("--config", str(ROOT / c))] + ["--trainer.logger", "false"]
    program, sys.argv[1:] = sys.argv[1:], []  # the recipe reads only the arguments given here
    try:
        return recipe.main(args, run=False).model
    finally:
        sys.argv[1:] = program


def parameters(opts: argparse.Namespace) -> dict[str, Any]:
    protocol = json.loads((FOLDER / "protocol.json").read_text())
    out = {}
    for name, cand in protocol["candidates"].items():
        if cand["peer"] != "recipe":
            continue
        model = build(cand["configs"])
        parts = {part: sum(p.numel() for p in getattr(model, part).parameters())
                 for part in ("adapter", "encoder", "head") if getattr(model, part, None) is not None}
        out[f"parameters/{name}"] = {"total": sum(p.numel() for p in model.parameters()), **parts}
    return out


MEASURE = {"parameters": parameters}
