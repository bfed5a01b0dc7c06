"""``python -m studies peptides_field measure parameters``: each recipe candidate's model built from its configs
(untrained): its parameters in all and by part, against the field's budget of 500k."""

from __future__ import annotations

import json
from typing import Any

from studies._runner.train import ROOT, parameters

OPTIONS: dict[str, Any] = {}


def count(opts: Any) -> dict[str, Any]:
    protocol = json.loads((ROOT / "studies" / "peptides_field" / "protocol.json").read_text())
    return {f"parameters/{n}": parameters("graph_graph", c["configs"])
            for n, c in protocol["candidates"].items() if c["peer"] == "recipe"}


MEASURE = {"parameters": count}
